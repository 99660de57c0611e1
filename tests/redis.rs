//! Redis lock URLs (issue 28, contract §19): lockrun against a real
//! redis-server that each test starts for itself on 127.0.0.1, on a free
//! port, in a temporary directory, with nothing saved. Without
//! redis-server the tests print "SKIPPED: redis-server not found" where a
//! person sees it, and fail instead under CI (CI=true, or
//! LOCKRUN_TEST_REQUIRE_ALL as .ci/run sets it).
// Unix: these spawn sh, read /proc and send signals; tests/windows.rs is
// the Windows suite.
#![cfg(unix)]
#![cfg(feature = "redis")]

mod common;
mod servers;

use common::meter::read_meter;
use common::*;
use servers::free_port;
use servers::redis::*;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn stderr_of(bg: &mut Background) -> String {
    let mut text = String::new();
    if let Some(mut err) = bg.child.stderr.take() {
        let _ = err.read_to_string(&mut text);
    }
    text
}

/// Kills the `sleep SECONDS` a test started if it is still running (a
/// broken build leaves it): checked by its command line first.
struct SleepGuard(Vec<(i32, &'static str)>);

impl Drop for SleepGuard {
    fn drop(&mut self) {
        for (pid, seconds) in &self.0 {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if cmdline == format!("sleep\0{seconds}\0").as_bytes() {
                // SAFETY: kill(2) on a process just checked to be this test's.
                unsafe { libc::kill(*pid, libc::SIGKILL) };
            }
        }
    }
}

/// The renewal compares the token: a key that now holds another holder's
/// value is not renewed as ours, and the command is stopped.
#[test]
fn a_lock_key_taken_over_from_outside_stops_the_command_within_the_ttl() {
    let Some(redis) = Redis::start() else { return };
    let url = redis.url("stolen");
    let mut cmd = std_lockrun();
    cmd.args(["--ttl", "2s", "--kill-grace", "1s", &url, "--"])
        .args([
            "sh",
            "-c",
            "echo ready $LOCKRUN_FENCING_TOKEN; exec sleep 1019",
        ])
        .stderr(Stdio::piped());
    let mut lockrun = Background::spawn(cmd);
    let token: i64 = lockrun.expect_ready()[0].parse().expect("a token");
    // Another client's key, as if ours had expired and been taken, with a
    // long lease: a renewal that did not compare would keep it alive.
    let theirs = format!("{{\"fencing_token\":{}}}", token + 1);
    assert_eq!(redis.cli(&["SET", "stolen", &theirs, "PX", "60000"]), "OK");
    let stolen = Instant::now();
    assert_eq!(lockrun.wait_exit(BOUND).code(), Some(76));
    assert!(
        stolen.elapsed() < Duration::from_secs(2),
        "{:?}",
        stolen.elapsed()
    );
    let stderr = stderr_of(&mut lockrun);
    assert!(
        stderr.contains(&format!("no longer holds our fencing token {token}")),
        "{stderr}"
    );
    // Their key is left alone.
    assert_eq!(redis.cli(&["GET", "stolen"]), theirs);
}

fn paused_server_stops_the_command(pause: impl FnOnce(&Redis), resume: impl FnOnce(&Redis)) {
    let Some(redis) = Redis::start() else { return };
    let url = redis.url("paused");
    let mut cmd = std_lockrun();
    // The command ignores SIGTERM: the SIGKILL after the grace is needed.
    cmd.args(["--ttl", "2s", "--kill-grace", "1s", &url, "--"])
        .args(["sh", "-c", "trap '' TERM; echo ready $$; exec sleep 1020"])
        .stderr(Stdio::piped());
    let mut lockrun = Background::spawn(cmd);
    let command = lockrun.expect_ready()[0].parse::<i32>().expect("pid");
    let _guard = SleepGuard(vec![(command, "1020")]);
    let paused = Instant::now();
    pause(&redis);
    let status = lockrun.wait_exit(BOUND);
    let took = paused.elapsed();
    resume(&redis);
    assert_eq!(status.code(), Some(76));
    assert!(process_gone(command), "the command was not stopped");
    // Lost at the lease's end (2 s after the last renewal, at most), the
    // SIGKILL a second later: never the server's pause itself.
    assert!(took < Duration::from_secs(5), "{took:?}");
    let stderr = stderr_of(&mut lockrun);
    assert!(
        stderr.contains(&format!(
            "lockrun: lost the lock {url} while the command ran"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("could not be renewed for its whole TTL (2s)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("SIGKILL if it still ran 1s later"),
        "{stderr}"
    );
}

#[test]
fn a_server_in_debug_sleep_past_the_ttl_stops_the_command_76() {
    let sleeper = std::cell::RefCell::new(None::<Child>);
    paused_server_stops_the_command(
        |redis| {
            let child = Command::new("redis-cli")
                .args(["-p", &redis.port.to_string(), "DEBUG", "SLEEP", "6"])
                .stdout(Stdio::null())
                .spawn()
                .expect("redis-cli DEBUG SLEEP");
            *sleeper.borrow_mut() = Some(child);
        },
        |_| {
            if let Some(mut child) = sleeper.borrow_mut().take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        },
    );
}

#[test]
fn a_stopped_server_past_the_ttl_stops_the_command_76() {
    paused_server_stops_the_command(|r| r.signal("STOP"), |r| r.signal("CONT"));
}

#[test]
fn a_holder_killed_with_sigkill_passes_the_lock_on_when_its_lease_expires() {
    let Some(redis) = Redis::start() else { return };
    let url = redis.url("crash");
    let (mut holder, words) = Background::lockrun_holding(
        &["--ttl", "3s"],
        Path::new(&url),
        "echo ready $$; exec sleep 1021",
    );
    let command = words[0].parse::<i32>().expect("pid");
    let _guard = SleepGuard(vec![(command, "1021")]);
    wait_for("the record to name the command", || {
        holder_json(&url)["record"]["pid"] == command
    });
    kill(holder.pid(), "KILL");
    let killed = Instant::now();
    holder.wait_exit(BOUND);
    // The command does not outlive lockrun: nobody renews the lease.
    wait_for("the command to end with lockrun", || process_gone(command));
    // (Whether lockrun's watchdog or the command's own parent-death
    // signal stopped it is the shared run flow's business, tested there.)
    // Still held until the key's lease runs out, then a waiter gets it.
    lockrun().args(["-n", &url, "true"]).assert().code(75);
    lockrun()
        .args(["-w", "15", &url, "true"])
        .assert()
        .success();
    let took = killed.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "the lock should pass on within the TTL (3s), took {took:?}"
    );
}

/// The key gone between two renewals and the command ended before the
/// next one: the release's compare-and-delete must notice, or lockrun
/// reports success for a run another holder may have overlapped.
#[test]
fn a_key_gone_before_the_release_is_76_not_success() {
    let Some(redis) = Redis::start() else { return };
    let url = redis.url("vanished");
    let mut cmd = std_lockrun();
    // Renewals every 15 s: none comes between the delete and the end.
    cmd.args(["--ttl", "60s", &url, "--"])
        .args(["sh", "-c", "echo ready; read go"])
        .stderr(Stdio::piped());
    let mut lockrun = Background::spawn(cmd);
    lockrun.expect_ready();
    wait_for("the record to be stored", || {
        holder_json(&url)["record"]["pid"].is_number()
    });
    assert_eq!(redis.cli(&["DEL", "vanished"]), "1");
    lockrun.release();
    assert_eq!(lockrun.wait_exit(BOUND).code(), Some(76));
    let stderr = stderr_of(&mut lockrun);
    assert!(
        stderr.contains("was gone from Redis when the command ended"),
        "{stderr}"
    );
}

#[test]
fn unreachable_redis_exits_69_and_never_runs_the_command() {
    let dir = temp_dir();
    let marker = dir.path().join("ran");
    let (_port_guard, port) = refusing_port();
    let url = format!("redis://127.0.0.1:{port}#x");
    let out = lockrun()
        .args([&url, "touch", &marker.to_string_lossy()])
        .assert()
        .code(69);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        stderr.starts_with(&format!(
            "lockrun: cannot take {url}: cannot connect to Redis at 127.0.0.1:{port}"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("the command was not run"), "{stderr}");
    assert!(!marker.exists());
    lockrun().args(["check", "-q", &url]).assert().code(69);
    lockrun().args(["holder", &url]).assert().code(69);
}

#[test]
fn lock_url_usage_errors_exit_64_and_a_password_in_the_url_is_refused_unseen() {
    let dir = temp_dir();
    let marker = dir.path().join("ran");
    for args in [
        vec!["redis://127.0.0.1:1", "true"],
        vec!["redis://127.0.0.1:1#", "true"],
        vec!["redis://127.0.0.1:notaport#x", "true"],
        vec!["redis://127.0.0.1:1/db#x", "true"],
        vec!["redis://127.0.0.1:1?x=1#x", "true"],
        vec!["redis://127.0.0.1:1#a%0Ab", "true"],
        vec!["redis+sentinel://127.0.0.1:1#x", "true"],
        vec!["-s", "redis://127.0.0.1:1#x", "true"],
        vec!["-F", "redis://127.0.0.1:1#x", "true"],
        vec!["--poll", "1", "redis://127.0.0.1:1#x", "true"],
        vec!["--ttl", "100ms", "redis://127.0.0.1:1#x", "true"],
        vec!["--slots", "2", "-s", "redis://127.0.0.1:1#x", "true"],
    ] {
        let out = lockrun().args(&args).assert().code(64);
        let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
        assert!(stderr.starts_with("lockrun: "), "{args:?}: {stderr}");
    }
    // A password in the URL: refused before anything is sent, and shown
    // nowhere, not even in `ps` while lockrun reads its arguments.
    for url in [
        "redis://app:s3cretpw@127.0.0.1:1#x",
        "redis://:s3cretpw@127.0.0.1:1#x",
    ] {
        let out = lockrun()
            .args([url, "touch", &marker.to_string_lossy()])
            .assert()
            .code(64);
        let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
        assert!(!stderr.contains("s3cretpw"), "{stderr}");
        assert!(stderr.contains("REDISCLI_AUTH"), "{stderr}");
        assert!(!marker.exists());
    }
}

#[test]
fn an_acl_user_with_the_password_from_the_environment_and_a_wrong_one_69() {
    let Some(redis) = Redis::start() else { return };
    redis.cli(&[
        "ACL",
        "SETUSER",
        "app",
        "on",
        ">apppw-9f2",
        "~*",
        "&*",
        "+@all",
    ]);
    let url = format!("redis://app@127.0.0.1:{}#acl", redis.port);
    for var in ["REDISCLI_AUTH", "LOCKRUN_REDIS_PASSWORD"] {
        let out = lockrun()
            .args([&url, "sh", "-c", "echo $LOCKRUN_FENCING_TOKEN"])
            .env_remove("REDISCLI_AUTH")
            .env_remove("LOCKRUN_REDIS_PASSWORD")
            .env(var, "apppw-9f2")
            .assert()
            .success();
        let token = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
        assert!(token.trim().parse::<i64>().is_ok(), "{var}: {token}");
    }
    // The record and holder's output carry no password.
    let holder = lockrun()
        .args(["holder", "--json", &url])
        .env("REDISCLI_AUTH", "apppw-9f2")
        .assert()
        .success();
    let text = String::from_utf8_lossy(&holder.get_output().stdout).into_owned();
    assert!(text.contains("\"state\":\"free\""), "{text}");
    assert!(!text.contains("apppw"), "{text}");
    assert!(!redis.cli(&["GET", "acl:last"]).contains("apppw"));
    // A wrong password: 69, saying who was refused and where the password
    // came from, never what it was.
    let out = lockrun()
        .args([&url, "true"])
        .env_remove("LOCKRUN_REDIS_PASSWORD")
        .env("REDISCLI_AUTH", "wrong-pw-77")
        .assert()
        .code(69);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(stderr.contains("refused user app"), "{stderr}");
    assert!(stderr.contains("$REDISCLI_AUTH"), "{stderr}");
    assert!(!stderr.contains("wrong-pw-77"), "{stderr}");
}

#[test]
fn a_different_number_of_slots_or_none_is_a_usage_error_naming_both() {
    let Some(redis) = Redis::start() else { return };
    let url = redis.url("pool");
    let (mut holder, words) = Background::lockrun_holding(
        &["--slots", "2"],
        Path::new(&url),
        "echo ready $$ $LOCKRUN_SLOT; read x",
    );
    assert_eq!(words[1], "1");
    let out = lockrun()
        .args(["--slots", "3", &url, "true"])
        .assert()
        .code(64);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        stderr.contains("is used with --slots 2") && stderr.contains("not --slots 3"),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("pid {}", words[0])), "{stderr}");
    let out = lockrun().args(["-n", &url, "true"]).assert().code(64);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(stderr.contains("this lockrun has no --slots"), "{stderr}");
    // holder/check show every slot.
    let json = holder_json(&url);
    assert_eq!(json["state"], "held", "{json}");
    assert_eq!(json["slots"], 2, "{json}");
    assert_eq!(json["slot_reports"][0]["state"], "held", "{json}");
    assert_eq!(json["slot_reports"][1]["state"], "free", "{json}");
    assert_eq!(
        json["slot_reports"][0]["record"]["pid"].to_string(),
        words[0]
    );
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
    // And the other way round: a plain holder refuses a slot contender.
    let (mut plain, words) =
        Background::lockrun_holding(&[], Path::new(&url), "echo ready $$; read x");
    let out = lockrun()
        .args(["--slots", "2", "-n", &url, "true"])
        .assert()
        .code(64);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        stderr.contains(&format!("is held without --slots (by pid {}", words[0])),
        "{stderr}"
    );
    plain.release();
    assert!(plain.wait_exit(BOUND).success());
}

#[test]
fn a_lost_slot_stops_its_command_76_and_frees_only_that_slot() {
    let Some(redis) = Redis::start() else { return };
    let url = redis.url("lanes");
    let (mut first, _) = Background::lockrun_holding(
        &["--slots", "2"],
        Path::new(&url),
        "echo ready $LOCKRUN_SLOT; read x",
    );
    let mut cmd = std_lockrun();
    cmd.args(["--slots", "2", "--ttl", "2s", &url, "--"])
        .args(["sh", "-c", "echo ready $LOCKRUN_SLOT; exec sleep 1022"])
        .stderr(Stdio::piped());
    let mut second = Background::spawn(cmd);
    assert_eq!(second.expect_ready(), ["2"]);
    assert_eq!(redis.cli(&["DEL", "lanes:slot:2"]), "1");
    assert_eq!(second.wait_exit(BOUND).code(), Some(76));
    let stderr = stderr_of(&mut second);
    assert!(
        stderr.contains("lanes:slot:2 is gone from Redis"),
        "{stderr}"
    );
    // Slot 1 is still held; slot 2 is free again.
    let out = lockrun()
        .args(["--slots", "2", "-n", &url, "sh", "-c", "echo $LOCKRUN_SLOT"])
        .assert()
        .success();
    assert_eq!(
        String::from_utf8_lossy(&out.get_output().stdout).trim(),
        "2"
    );
    first.release();
    assert!(first.wait_exit(BOUND).success());
}

#[test]
fn rediss_verifies_the_server_with_the_ca_given_and_refuses_another() {
    let Some(pki) = Pki::make() else { return };
    let Some(redis) = Redis::start_tls(&pki, false) else {
        return;
    };
    let url = format!("rediss://127.0.0.1:{}#secure", redis.tls_port);
    let ca = pki.file("ca.pem");
    let out = lockrun()
        .args([
            "--cacert",
            &ca,
            &url,
            "sh",
            "-c",
            "echo $LOCKRUN_FENCING_TOKEN",
        ])
        .assert()
        .success();
    let token = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(token.trim().parse::<i64>().is_ok(), "{token}");
    // holder/check take the same option.
    lockrun()
        .args(["check", "--cacert", &ca, &url])
        .assert()
        .code(1);
    assert_eq!(redis.cli(&["EXISTS", "secure:last"]), "1");
    // Another CA, or none (the system's roots): 69, saying it was TLS.
    for args in [vec!["--cacert", &*pki.file("other-ca.pem")], vec![]] {
        let out = lockrun().args(&args).args([&url, "true"]).assert().code(69);
        let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
        assert!(stderr.contains("TLS with Redis at 127.0.0.1"), "{stderr}");
    }
    // TLS files with a plain redis:// URL: a usage error saying what to
    // write instead.
    let plain = format!("redis://127.0.0.1:{}#secure", redis.port);
    let out = lockrun()
        .args(["--cacert", &ca, &plain, "true"])
        .assert()
        .code(64);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        stderr.contains("write the lock URL as rediss://"),
        "{stderr}"
    );
}

#[test]
fn rediss_presents_the_client_certificate_when_the_server_asks() {
    let Some(pki) = Pki::make() else { return };
    let Some(redis) = Redis::start_tls(&pki, true) else {
        return;
    };
    let url = format!("rediss://127.0.0.1:{}#mtls", redis.tls_port);
    let (ca, cert, key) = (
        pki.file("ca.pem"),
        pki.file("client.pem"),
        pki.file("client.key"),
    );
    lockrun()
        .args([
            "--cacert", &ca, "--cert", &cert, "--key", &key, &url, "true",
        ])
        .assert()
        .success();
    // Without it the server hangs up: 69.
    lockrun()
        .args(["--cacert", &ca, &url, "true"])
        .assert()
        .code(69);
    lockrun()
        .args(["--cacert", &ca, "--cert", &cert, &url, "true"])
        .assert()
        .code(64);
}

/// A primary, its replica, and one Sentinel watching them.
struct Sentinelled {
    primary: Redis,
    replica: Redis,
    sentinel: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Sentinelled {
    fn drop(&mut self) {
        let _ = self.sentinel.kill();
        let _ = self.sentinel.wait();
    }
}

impl Sentinelled {
    fn start() -> Option<Sentinelled> {
        let sentinel_bin = ["/usr/bin/redis-sentinel", "redis-sentinel"]
            .into_iter()
            .find(|b| Path::new(b).exists() || has(b));
        let Some(sentinel_bin) = sentinel_bin else {
            missing("redis-sentinel");
            return None;
        };
        let primary = Redis::start()?;
        let replica = Redis::start_with(
            &["--replicaof", "127.0.0.1", &primary.port.to_string()],
            false,
        )?;
        let dir = temp_dir();
        let port = free_port();
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\nsentinel monitor lockm 127.0.0.1 {} 1\nsentinel down-after-milliseconds lockm 1000\nsentinel failover-timeout lockm 5000\n",
                dir.path().display(),
                primary.port
            ),
        )
        .expect("sentinel.conf");
        let sentinel = Command::new(sentinel_bin)
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start redis-sentinel");
        let set = Sentinelled {
            primary,
            replica,
            sentinel,
            port,
            _dir: dir,
        };
        wait_for("the replica to be in sync", || {
            set.replica
                .cli(&["INFO", "replication"])
                .contains("master_link_status:up")
        });
        wait_for("the Sentinel to know the replica", || {
            set.ask(&["SENTINEL", "replicas", "lockm"])
                .lines()
                .any(|l| l == "slave")
        });
        Some(set)
    }

    fn ask(&self, args: &[&str]) -> String {
        Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default()
    }

    fn url(&self, name: &str) -> String {
        format!("redis+sentinel://127.0.0.1:{}/lockm#{name}", self.port)
    }

    fn primary_port(&self) -> String {
        self.ask(&["SENTINEL", "get-master-addr-by-name", "lockm"])
            .lines()
            .nth(1)
            .unwrap_or("")
            .to_owned()
    }
}

#[test]
fn through_sentinel_a_holder_keeps_the_lock_across_a_failover() {
    let Some(set) = Sentinelled::start() else {
        return;
    };
    let url = set.url("job");
    let (mut holder, words) = Background::lockrun_holding(
        &["--ttl", "4s"],
        Path::new(&url),
        "echo ready $LOCKRUN_FENCING_TOKEN; read x",
    );
    let token: i64 = words[0].parse().expect("a token");
    assert_eq!(set.primary.cli(&["EXISTS", "job"]), "1");
    // The replica is promoted; the old primary becomes its replica.
    assert_eq!(set.ask(&["SENTINEL", "FAILOVER", "lockm"]), "OK");
    let replica = set.replica.port.to_string();
    wait_for("the Sentinel to name the new primary", || {
        set.primary_port() == replica
    });
    wait_for("the replica to be promoted", || {
        set.replica.cli(&["ROLE"]).starts_with("master")
    });
    // Renewed on the new primary, found through the Sentinel (its calls
    // of the renewal script there), past the TTL of the lease that the
    // old primary had: still held by the same token.
    let promoted = Instant::now();
    let renewals = || {
        set.replica
            .cli(&["INFO", "commandstats"])
            .lines()
            .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum::<u64>()
    };
    wait_for("renewals on the new primary past the TTL", || {
        renewals() >= 3 && promoted.elapsed() > Duration::from_secs(4)
    });
    let json = holder_json(&url);
    assert_eq!(json["state"], "held", "{json} {}", holder.stderr_text());
    assert_eq!(json["redis"]["fencing_token"], token, "{json}");
    lockrun().args(["-n", &url, "true"]).assert().code(75);
    holder.release();
    assert!(
        holder.wait_exit(BOUND).success(),
        "{}",
        holder.stderr_text()
    );
    // The counter came with the failover: the next token is larger.
    let out = lockrun()
        .args([&url, "sh", "-c", "echo $LOCKRUN_FENCING_TOKEN"])
        .assert()
        .success();
    let next: i64 = String::from_utf8_lossy(&out.get_output().stdout)
        .trim()
        .parse()
        .expect("a token");
    assert!(next > token, "{next} after {token}");
}

#[test]
fn a_sentinel_that_does_not_know_the_primary_is_69() {
    let Some(set) = Sentinelled::start() else {
        return;
    };
    let url = format!("redis+sentinel://127.0.0.1:{}/nosuch#job", set.port);
    let out = lockrun().args([&url, "true"]).assert().code(69);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        stderr.contains("does not know a primary named nosuch"),
        "{stderr}"
    );
}

#[test]
fn a_waiter_uses_no_cpu_and_is_counted_by_holder() {
    let Some(redis) = Redis::start() else { return };
    let url = redis.url("idle");
    let (mut holder, _) =
        Background::lockrun_holding(&["--ttl", "30s"], Path::new(&url), "echo ready; read x");
    let mut cmd = std_lockrun();
    cmd.args(["-w", "60", &url, "true"]);
    let mut waiter = Background::spawn_quiet(cmd);
    wait_for("the waiter to subscribe", || {
        holder_json(&url)["waiting"] == 1
    });
    let pid = waiter.pid();
    let (ticks, woke) = (cpu_ticks(pid), wakeups(pid));
    // The window over which CPU time is counted (not a synchronisation).
    std::thread::sleep(Duration::from_secs(3));
    let (used, woke) = (cpu_ticks(pid) - ticks, wakeups(pid) - woke);
    eprintln!("waiter {pid}: {used} ticks, {woke} wake-ups in 3 s");
    assert!(used <= 2, "the waiter used {used} clock ticks in 3 seconds");
    // The run flow's own 250 ms tick (a deadline to watch), no more: the
    // thread waiting in Redis sleeps until the release message.
    assert!(
        woke <= 40,
        "the waiter's threads woke {woke} times in 3 seconds"
    );
    assert!(!waiter.has_exited());
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
    assert!(waiter.wait_exit(BOUND).success());
}

#[test]
fn hostile_lock_names_are_keys_like_any_other_and_shown_escaped() {
    let Some(redis) = Redis::start() else { return };
    let long = "x".repeat(10 * 1024);
    for name in [
        "quote\"and'apostrophe",
        "日本語/ジョブ ✓",
        "a%23hash%20and%25percent",
        "\u{202e}reversed",
        long.as_str(),
    ] {
        let url = redis.url(name);
        let (mut holder, _) =
            Background::lockrun_holding(&[], Path::new(&url), "echo ready; read x");
        lockrun().args(["-n", &url, "true"]).assert().code(75);
        let text = holder_text(&url);
        assert!(text.contains(": held (exclusive) by pid"), "{name}: {text}");
        assert!(!text.contains('\u{202e}'), "{name}: {text}");
        holder.release();
        assert!(holder.wait_exit(BOUND).success());
    }
    // The percent-decoded name is the key.
    assert_eq!(redis.cli(&["EXISTS", "a#hash and%percent:last"]), "1");
    // A control character, even percent-encoded (NUL, newline): 64.
    for name in ["a%00b", "a%0Ab", "%1B[31m"] {
        lockrun().args([&redis.url(name), "true"]).assert().code(64);
    }
}

#[test]
fn a_replica_or_a_cluster_node_is_refused_69_saying_why() {
    let Some(primary) = Redis::start() else {
        return;
    };
    let Some(replica) = Redis::start_with(
        &["--replicaof", "127.0.0.1", &primary.port.to_string()],
        false,
    ) else {
        return;
    };
    let out = lockrun()
        .args([&replica.url("job"), "true"])
        .assert()
        .code(69);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(stderr.contains("is a read-only replica"), "{stderr}");
    let Some(node) = Redis::start_with(&["--cluster-enabled", "yes"], false) else {
        return;
    };
    let out = lockrun().args([&node.url("job"), "true"]).assert().code(69);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(stderr.contains("runs in cluster mode"), "{stderr}");
}

/// Without persistence a restarted server has forgotten the key: the
/// holder's next renewal finds it gone, and the command is stopped.
#[test]
fn a_server_restarted_while_holding_stops_the_command_76() {
    let Some(mut redis) = Redis::start() else {
        return;
    };
    let url = redis.url("restart");
    let mut cmd = std_lockrun();
    cmd.args(["--ttl", "2s", &url, "--"])
        .args(["sh", "-c", "echo ready; exec sleep 1023"])
        .stderr(Stdio::piped());
    let mut lockrun = Background::spawn(cmd);
    lockrun.expect_ready();
    let _ = redis.child.kill();
    let _ = redis.child.wait();
    let port = redis.port.to_string();
    let restarted = Command::new(SERVER)
        .args([
            "--port",
            &port,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(redis.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("restart redis-server");
    redis.child = restarted;
    assert_eq!(lockrun.wait_exit(BOUND).code(), Some(76));
    let stderr = stderr_of(&mut lockrun);
    // Gone (the restarted server answered) or not renewed for the TTL
    // (it had not come back yet): either way the command was stopped.
    assert!(
        stderr.contains("is gone from Redis") || stderr.contains("for its whole TTL"),
        "{stderr}"
    );
}

#[test]
fn waiters_are_served_in_the_order_they_came() {
    let Some(redis) = Redis::start() else { return };
    let url = redis.url("fifo");
    let dir = temp_dir();
    let order = dir.path().join("order");
    let (mut holder, _) = Background::lockrun_holding(&[], Path::new(&url), "echo ready; read x");
    let mut waiters = Vec::new();
    for i in 1..=4 {
        let mut cmd = std_lockrun();
        cmd.args(["-w", "60", &url, "sh", "-c"])
            .arg(format!("echo {i} >> '{}'", order.display()));
        waiters.push(Background::spawn_quiet(cmd));
        // Each is queued before the next one comes.
        wait_for("the waiter to be queued", || {
            redis.cli(&["ZCARD", "fifo:queue"]) == i.to_string()
        });
    }
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
    for waiter in &mut waiters {
        assert!(waiter.wait_exit(BOUND).success());
    }
    let served = std::fs::read_to_string(&order).expect("read the order");
    assert_eq!(served, "1\n2\n3\n4\n");
    assert_eq!(redis.cli(&["ZCARD", "fifo:queue"]), "0");
}

#[test]
fn a_queued_waiter_that_died_keeps_its_turn_only_until_its_ttl() {
    let Some(redis) = Redis::start() else { return };
    let url = redis.url("deadq");
    let (mut holder, _) = Background::lockrun_holding(&[], Path::new(&url), "echo ready; read x");
    let mut cmd = std_lockrun();
    cmd.args(["--ttl", "2s", "-w", "60", &url, "true"]);
    let mut dead = Background::spawn_quiet(cmd);
    wait_for("the waiter to be queued", || {
        redis.cli(&["ZCARD", "deadq:queue"]) == "1"
    });
    kill(dead.pid(), "KILL");
    dead.wait_exit(BOUND);
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
    // Free, but the dead waiter's turn: a newcomer is told so.
    let out = lockrun().args(["-n", &url, "true"]).assert().code(75);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        stderr.contains("is held for 1 lockrun queued before this one"),
        "{stderr}"
    );
    // Its place expires with its TTL, and the next waiter gets the lock.
    let started = Instant::now();
    lockrun()
        .args(["-w", "20", &url, "true"])
        .assert()
        .success();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(redis.cli(&["ZCARD", "deadq:queue"]), "0");
}

#[test]
fn through_sentinel_a_waiter_gets_the_lock_after_a_failover() {
    let Some(set) = Sentinelled::start() else {
        return;
    };
    let url = set.url("next");
    let (mut holder, _) =
        Background::lockrun_holding(&["--ttl", "3s"], Path::new(&url), "echo ready; read x");
    let mut cmd = std_lockrun();
    cmd.args(["--ttl", "3s", "-w", "30", &url, "--", "echo", "ran"]);
    let mut waiter = Background::spawn_quiet(cmd);
    wait_for("the waiter to be queued", || {
        set.primary.cli(&["ZCARD", "next:queue"]) == "1"
    });
    assert_eq!(set.ask(&["SENTINEL", "FAILOVER", "lockm"]), "OK");
    let replica = set.replica.port.to_string();
    wait_for("the Sentinel to name the new primary", || {
        set.primary_port() == replica
    });
    holder.release();
    assert!(
        holder.wait_exit(BOUND).success(),
        "{}",
        holder.stderr_text()
    );
    let released = Instant::now();
    // Its subscription may be on the old primary: woken by its own
    // look at the queue (every TTL/3) if not by the message.
    assert_eq!(
        waiter.line(BOUND).as_deref(),
        Some("ran"),
        "{}",
        waiter.stderr_text()
    );
    assert!(waiter.wait_exit(BOUND).success());
    assert!(
        released.elapsed() < Duration::from_secs(4),
        "{:?}",
        released.elapsed()
    );
}

/// `--skip-if-succeeded-within` on Redis goes by the record the last
/// release kept under `NAME:last`, read with the lock held; and
/// `check --token` is 0 only for the current holder's token (both came
/// from other branches the day Redis landed).
#[test]
fn skip_if_succeeded_and_check_token_work_on_redis() {
    let Some(redis) = Redis::start() else { return };
    let url = redis.url("nightly");
    let dir = temp_dir();
    let ran = dir.path().join("ran");
    let run = |code: &str| {
        lockrun()
            .args(["--skip-if-succeeded-within", "1h", &url, "sh", "-c"])
            .arg(format!("echo x >> '{}'; exit {code}", ran.display()))
            .output()
            .expect("run lockrun")
    };
    let runs = || {
        std::fs::read_to_string(&ran)
            .unwrap_or_default()
            .lines()
            .count()
    };
    // A failure never skips the next run; a success skips the one after.
    assert_eq!(run("1").status.code(), Some(1));
    assert_eq!(run("0").status.code(), Some(0));
    assert_eq!(runs(), 2);
    let skipped = run("0");
    assert_eq!(skipped.status.code(), Some(0));
    assert_eq!(runs(), 2, "{skipped:?}");
    // check --token.
    let check = |token: &str| {
        lockrun()
            .args(["check", "-q", "--token", token, &url])
            .output()
            .expect("run check")
            .status
            .code()
    };
    let (mut holder, words) = Background::lockrun_holding(
        &[],
        Path::new(&url),
        r#"echo ready $LOCKRUN_FENCING_TOKEN "$LOCKRUN_LOCK_URL"; read x"#,
    );
    let token = words[0].clone();
    assert_eq!(words.get(1), Some(&url));
    wait_for("the record to carry the token", || check(&token) == Some(0));
    let older = (token.parse::<i64>().expect("a token") - 1).to_string();
    assert_eq!(check(&older), Some(1));
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
    assert_eq!(check(&token), Some(1));
}

/// Issue 30 on Redis: three "hosts" (each in a UTS namespace of its own,
/// so their records name three hosts) start the same job on one lock at
/// once: exactly one runs it, the others find its success under
/// `NAME:last` with the lock held, and skip.
#[test]
fn three_hosts_on_one_redis_lock_started_at_once_exactly_one_runs() {
    let Some(redis) = Redis::start() else { return };
    let own_hosts = rustix::process::geteuid().is_root()
        && std::process::Command::new("unshare")
            .args(["--uts", "sh", "-c", "hostname lockrun-test-host"])
            .status()
            .is_ok_and(|s| s.success());
    if !own_hosts {
        skip("needs root and unshare --uts to give each process a host name of its own");
        return;
    }
    let url = redis.url("fleet");
    let dir = temp_dir();
    let runs = dir.path().join("runs");
    let mut hosts: Vec<Background> = (1..=3)
        .map(|n| {
            let mut cmd = std::process::Command::new("unshare");
            cmd.args(["--uts", "sh", "-c"])
                .arg(format!(
                    "hostname db{n} && exec \"$0\" -w 60 --skip-if-succeeded-within 1h \"$1\" sh -c 'echo \"$(hostname)\" >> \"$0\"; read x' \"$2\""
                ))
                .args([bin(), &url])
                .arg(&runs);
            Background::spawn_quiet(cmd)
        })
        .collect();
    let lines = || {
        std::fs::read_to_string(&runs)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    wait_for("one host to run and two to queue", || {
        lines() >= 1 && holder_json(&url)["waiting"] == 2
    });
    for h in &mut hosts {
        h.release();
    }
    for mut h in hosts {
        let status = h.wait_exit(BOUND);
        assert!(status.success(), "{status:?}: {}", h.stderr_text());
    }
    let ran = std::fs::read_to_string(&runs).unwrap_or_default();
    assert_eq!(ran.lines().count(), 1, "more than one host ran: {ran}");
    // The two that skipped let go of the lock at once (not after a TTL).
    lockrun().args(["check", "-q", &url]).assert().code(1);
    let record = holder_json(&url)["record"].clone();
    assert_eq!(record["host"], ran.trim(), "{record}");
    assert_eq!(record["exit"]["code"], 0);
}

/// The control for the counter test above (issue 28 item 4): the same
/// workers and the same read, widen, write body without lockrun lose
/// updates and overlap, so the locked test's counts can fail.
#[test]
fn without_the_lock_the_same_counter_loses_updates() {
    let dir = temp_dir();
    let counter = dir.path().join("counter");
    std::fs::write(&counter, "0\n").expect("write counter");
    let meter = dir.path().join("meter");
    let body = format!(
        "echo \"start $$ none\" >> {m}; n=$(cat {c}); sleep 0.01; echo $((n+1)) > {c}; echo \"end $$ none\" >> {m}",
        c = counter.display(),
        m = meter.display()
    );
    let (workers, rounds) = (3, 20);
    let mut running: Vec<Child> = (0..workers)
        .map(|_| {
            let script = format!(
                "i=0; while [ $i -lt {rounds} ]; do sh -c \"$0\" || exit 9; i=$((i+1)); done"
            );
            Command::new("sh")
                .args(["-c", &script, &body])
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
        .unwrap_or(0);
    let seen = read_meter(dir.path(), 1);
    assert_eq!(seen.ended, workers * rounds);
    assert!(
        total < workers * rounds && seen.peak > 1,
        "without a lock no update was lost ({total} of {}) and nothing overlapped (peak {}): the counter test could not fail",
        workers * rounds,
        seen.peak
    );
}

/// A primary and one replica, the replica's pid for SIGSTOP.
fn primary_and_replica() -> Option<(Redis, Redis)> {
    let primary = Redis::start()?;
    let replica = Redis::start_with(
        &["--replicaof", "127.0.0.1", &primary.port.to_string()],
        false,
    )?;
    wait_for("the replica to be online on the primary", || {
        primary.cli(&["ROLE"]).contains(&replica.port.to_string())
    });
    Some((primary, replica))
}

fn wait_calls(redis: &Redis) -> u64 {
    redis
        .cli(&["INFO", "commandstats"])
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_wait:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// Issue 28 item 1: with a replica connected the acquire waits for it to
/// acknowledge (`WAIT 1`), so the command's token is on the replica
/// before the command starts; a replica that does not acknowledge is
/// waited for TTL/4 at most and named in a warning; LOCKRUN_REDIS_WAIT=0
/// turns it off.
#[test]
fn the_acquire_waits_for_a_replica_and_warns_when_none_acknowledges() {
    let Some((primary, replica)) = primary_and_replica() else {
        return;
    };
    let url = primary.url("job");
    let script = format!(
        "echo $LOCKRUN_FENCING_TOKEN; redis-cli -h 127.0.0.1 -p {} GET job:fencing",
        replica.port
    );
    let out = lockrun()
        .args([&url, "sh", "-c", &script])
        .env_remove("LOCKRUN_REDIS_WAIT")
        .assert()
        .success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0], lines[1], "the replica had not the token yet");
    assert_eq!(wait_calls(&primary), 1, "no WAIT after the acquire");
    // A replica that does not answer: the run goes on after TTL/4, warned.
    replica.signal("STOP");
    let out = lockrun()
        .args(["--ttl", "2s", &url, "true"])
        .env_remove("LOCKRUN_REDIS_WAIT")
        .assert()
        .success();
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        stderr.contains("none of the 1 replica(s)")
            && stderr.contains("acknowledged fencing token 2 within 500ms"),
        "{stderr}"
    );
    assert_eq!(wait_calls(&primary), 2);
    // Turned off: no WAIT, no warning, even with the replica stopped.
    let out = lockrun()
        .args(["--ttl", "2s", &url, "true"])
        .env("LOCKRUN_REDIS_WAIT", "0")
        .assert()
        .success();
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(!stderr.contains("acknowledged"), "{stderr}");
    assert_eq!(wait_calls(&primary), 2);
    replica.signal("CONT");
    // No replica at all: no WAIT (it would only wait out its timeout).
    let Some(alone) = Redis::start() else { return };
    lockrun()
        .args([&alone.url("job"), "true"])
        .env_remove("LOCKRUN_REDIS_WAIT")
        .assert()
        .success();
    assert_eq!(wait_calls(&alone), 0);
}

/// A waiter rides out its server's restart (issue 29: waiters during a
/// failover): it was asked to wait, and the lock is to be had again once
/// the server is back, so it connects again rather than exit 69.
#[test]
fn a_waiter_rides_out_a_server_restart_and_gets_the_lock() {
    let Some(mut redis) = Redis::start() else {
        return;
    };
    let url = redis.url("ride");
    let (mut holder, _) = Background::lockrun_holding(
        &["--ttl", "2s"],
        Path::new(&url),
        "echo ready; exec sleep 1024",
    );
    let _guard = SleepGuard(vec![]);
    let mut cmd = std_lockrun();
    cmd.args(["--ttl", "2s", "-w", "60", &url, "--"]).args([
        "sh",
        "-c",
        "echo ready got-it; read x",
    ]);
    let mut waiter = Background::spawn_quiet(cmd);
    wait_for("the waiter to queue", || holder_json(&url)["waiting"] == 1);
    let _ = redis.child.kill();
    let _ = redis.child.wait();
    let port = redis.port.to_string();
    redis.child = Command::new(SERVER)
        .args(["--port", &port, "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(redis.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("restart redis-server");
    // The holder cannot renew on the new server: stopped, 76.
    assert_eq!(
        holder.wait_exit(BOUND).code(),
        Some(76),
        "{}",
        holder.stderr_text()
    );
    let words = waiter.expect_ready();
    assert_eq!(words, ["got-it"], "{}", waiter.stderr_text());
    waiter.release();
    assert!(
        waiter.wait_exit(BOUND).success(),
        "{}",
        waiter.stderr_text()
    );
}

/// Sentinel over TLS and with a password of its own (issue 28 item 2): a
/// primary and its replica that serve TLS and ask for the data password,
/// and a Sentinel that serves only TLS and asks for another password.
struct GuardedSentinel {
    primary: Redis,
    _replica: Redis,
    sentinel: Child,
    port: u16,
    pki: Pki,
    _dir: tempfile::TempDir,
}

impl Drop for GuardedSentinel {
    fn drop(&mut self) {
        let _ = self.sentinel.kill();
        let _ = self.sentinel.wait();
    }
}

const DATA_PW: &str = "data-pw-5c1";
const SENTINEL_PW: &str = "sentinel-pw-8e4";

impl GuardedSentinel {
    fn start() -> Option<GuardedSentinel> {
        let sentinel_bin = ["/usr/bin/redis-sentinel", "redis-sentinel"]
            .into_iter()
            .find(|b| Path::new(b).exists() || has(b));
        let Some(sentinel_bin) = sentinel_bin else {
            missing("redis-sentinel");
            return None;
        };
        let pki = Pki::make()?;
        let tls = |extra: &[&str]| {
            let mut args = vec![
                "--tls-cert-file".to_owned(),
                pki.file("server.pem"),
                "--tls-key-file".to_owned(),
                pki.file("server.key"),
                "--tls-ca-cert-file".to_owned(),
                pki.file("ca.pem"),
                "--tls-auth-clients".to_owned(),
                "no".to_owned(),
                "--tls-replication".to_owned(),
                "yes".to_owned(),
            ];
            args.extend(extra.iter().map(|s| s.to_string()));
            args
        };
        let primary_args = tls(&[]);
        let primary = Redis::start_with(
            &primary_args.iter().map(String::as_str).collect::<Vec<_>>(),
            true,
        )?;
        let replica_args = tls(&["--replicaof", "127.0.0.1", &primary.tls_port.to_string()]);
        let replica = Redis::start_with(
            &replica_args.iter().map(String::as_str).collect::<Vec<_>>(),
            true,
        )?;
        wait_for("the replica to be in sync over TLS", || {
            replica
                .cli(&["INFO", "replication"])
                .contains("master_link_status:up")
        });
        replica.cli(&["CONFIG", "SET", "masterauth", DATA_PW]);
        for node in [&primary, &replica] {
            node.cli(&["CONFIG", "SET", "requirepass", DATA_PW]);
        }
        let dir = temp_dir();
        let port = free_port();
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port 0\ntls-port {port}\nbind 127.0.0.1\ndir {dir}\n\
                 tls-cert-file {cert}\ntls-key-file {key}\ntls-ca-cert-file {ca}\n\
                 tls-auth-clients no\ntls-replication yes\nrequirepass {SENTINEL_PW}\n\
                 sentinel monitor lockm 127.0.0.1 {primary} 1\n\
                 sentinel auth-pass lockm {DATA_PW}\n\
                 sentinel down-after-milliseconds lockm 1000\n",
                dir = dir.path().display(),
                cert = pki.file("server.pem"),
                key = pki.file("server.key"),
                ca = pki.file("ca.pem"),
                primary = primary.tls_port
            ),
        )
        .expect("sentinel.conf");
        let sentinel = Command::new(sentinel_bin)
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start redis-sentinel");
        let set = GuardedSentinel {
            primary,
            _replica: replica,
            sentinel,
            port,
            pki,
            _dir: dir,
        };
        wait_for("the Sentinel to name the primary over TLS", || {
            set.ask(&["SENTINEL", "get-master-addr-by-name", "lockm"])
                .contains(&set.primary.tls_port.to_string())
        });
        Some(set)
    }

    fn ask(&self, args: &[&str]) -> String {
        Command::new("redis-cli")
            .args(["--tls", "--cacert", &self.pki.file("ca.pem")])
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .env("REDISCLI_AUTH", SENTINEL_PW)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default()
    }
}

#[test]
fn rediss_sentinel_uses_tls_and_the_sentinels_own_password() {
    let Some(set) = GuardedSentinel::start() else {
        return;
    };
    let url = format!("rediss+sentinel://127.0.0.1:{}/lockm#job", set.port);
    let ca = set.pki.file("ca.pem");
    let run = |args: &[&str], sentinel_pw: Option<&str>| {
        let mut cmd = lockrun();
        cmd.args(args)
            .env("REDISCLI_AUTH", DATA_PW)
            .env_remove("LOCKRUN_REDIS_PASSWORD")
            .env_remove("LOCKRUN_REDIS_SENTINEL_PASSWORD");
        if let Some(pw) = sentinel_pw {
            cmd.env("LOCKRUN_REDIS_SENTINEL_PASSWORD", pw);
        }
        cmd.assert()
    };
    // Both passwords, over TLS with the test CA: the command runs.
    let out = run(
        &[
            "--cacert",
            &ca,
            &url,
            "sh",
            "-c",
            "echo $LOCKRUN_FENCING_TOKEN",
        ],
        Some(SENTINEL_PW),
    )
    .success();
    let token = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert_eq!(token.trim(), "1", "{token}");
    // No Sentinel password: 69, naming the variable (the data password is
    // not sent to the Sentinel).
    let out = run(&["--cacert", &ca, &url, "true"], None).code(69);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        stderr.contains("asks for a password: set LOCKRUN_REDIS_SENTINEL_PASSWORD"),
        "{stderr}"
    );
    assert!(!stderr.contains(DATA_PW) && !stderr.contains(SENTINEL_PW));
    // A wrong one: refused, naming where it came from, never what it was.
    let out = run(&["--cacert", &ca, &url, "true"], Some("wrong-pw-31")).code(69);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        stderr.contains("refused the password in $LOCKRUN_REDIS_SENTINEL_PASSWORD"),
        "{stderr}"
    );
    assert!(!stderr.contains("wrong-pw-31"), "{stderr}");
    // Without the CA (the system's roots do not hold it): a TLS failure.
    let out = run(&[&url, "true"], Some(SENTINEL_PW)).code(69);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(stderr.contains("TLS with Sentinel"), "{stderr}");
    // Plain redis+sentinel:// against a TLS-only Sentinel: 69, and the
    // TLS files with it are a usage error that names the TLS scheme.
    let plain = format!("redis+sentinel://127.0.0.1:{}/lockm#job", set.port);
    run(&[&plain, "true"], Some(SENTINEL_PW)).code(69);
    let out = run(&["--cacert", &ca, &plain, "true"], Some(SENTINEL_PW)).code(64);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(stderr.contains("rediss+sentinel://"), "{stderr}");
    // holder reads the key the same way.
    let out = lockrun()
        .args(["holder", "--json", "--cacert", &ca, &url])
        .env("REDISCLI_AUTH", DATA_PW)
        .env("LOCKRUN_REDIS_SENTINEL_PASSWORD", SENTINEL_PW)
        .assert()
        .success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(text.contains("\"state\":\"free\""), "{text}");
}

/// Found by the fault harness (issue 29, `pause`: a holder stopped 7.1 s
/// after its primary was SIGSTOPped, TTL 4 s). A stopped primary must cost
/// the lock at the lease's deadline, not later; the bound is as loose as
/// `paused_server_stops_the_command`'s (TTL 2 s, under 5 s): TTL 3 s
/// here, under 4.5 s; the old code took about twice the TTL (2.0 s with
/// TTL 1 s, 8.2 s with TTL 4 s).
#[test]
fn through_sentinel_a_stopped_primary_stops_the_command_at_the_ttl() {
    let Some(set) = Sentinelled::start() else {
        return;
    };
    // No failover meanwhile: the primary is only stopped.
    assert_eq!(
        set.ask(&[
            "SENTINEL",
            "SET",
            "lockm",
            "down-after-milliseconds",
            "60000"
        ]),
        "OK"
    );
    let url = set.url("stopped");
    let mut cmd = std_lockrun();
    cmd.args(["--ttl", "3s", "--kill-grace", "1s", &url, "--"])
        .args(["sh", "-c", "echo ready $$; exec sleep 1021"])
        .stderr(Stdio::piped());
    let mut lockrun = Background::spawn(cmd);
    let command = lockrun.expect_ready()[0].parse::<i32>().expect("pid");
    let _guard = SleepGuard(vec![(command, "1021")]);
    let stopped = Instant::now();
    set.primary.signal("STOP");
    let status = lockrun.wait_exit(BOUND);
    let took = stopped.elapsed();
    set.primary.signal("CONT");
    let stderr = stderr_of(&mut lockrun);
    assert_eq!(status.code(), Some(76), "{stderr}");
    assert!(process_gone(command), "the command was not stopped");
    assert!(
        stderr.contains("could not be renewed for its whole TTL (3s)"),
        "{stderr}"
    );
    assert!(
        took < Duration::from_millis(4500),
        "stopped {took:?} after the primary, TTL 3s: {stderr}"
    );
}

/// Found by the fault harness (issue 29, `pause`): a lockrun that reached
/// the primary just before it was stopped, and was answered once it
/// resumed, after Sentinel had promoted the replica, took the lock on the
/// old primary (which still says ROLE master until Sentinel demotes it)
/// while another holder had it on the new one, with the same token, and
/// started its command. The acquire is now checked against the primary
/// Sentinel names after it; this one must wait for the holder.
#[test]
fn through_sentinel_an_acquire_answered_by_a_demoted_primary_does_not_count() {
    let Some(set) = Sentinelled::start() else {
        return;
    };
    let url = set.url("stale");
    let dir = temp_dir();
    let log = dir.path().join("log");
    set.primary.signal("STOP");
    // A: asks Sentinel, which still names the stopped primary, and waits
    // for its answer there.
    let mut a = std_lockrun();
    a.args(["--ttl", "2s", "-w", "60", &url, "--"])
        .arg("sh")
        .arg("-c")
        .arg(format!(
            "echo A-start >> {l}; echo A-end >> {l}",
            l = log.display()
        ))
        .stderr(Stdio::piped());
    let mut a = Background::spawn(a);
    let replica = set.replica.port.to_string();
    wait_for("the Sentinel to promote the replica", || {
        set.primary_port() == replica
    });
    wait_for("the replica to be promoted", || {
        set.replica.cli(&["ROLE"]).starts_with("master")
    });
    // B holds the lock on the new primary.
    let (mut b, _) = Background::lockrun_holding(
        &["--ttl", "2s"],
        Path::new(&url),
        &format!(
            "echo B-start >> {l}; echo ready; read x; echo B-end >> {l}",
            l = log.display()
        ),
    );
    // The old primary answers what A sent it before the failover.
    set.primary.signal("CONT");
    wait_for("A to be queued behind B on the new primary", || {
        holder_json(&url)["waiting"] == 1
    });
    b.release();
    assert!(b.wait_exit(BOUND).success(), "{}", b.stderr_text());
    let status = a.wait_exit(BOUND);
    let stderr = stderr_of(&mut a);
    assert!(status.success(), "{status:?}: {stderr}");
    let order = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        order.lines().collect::<Vec<_>>(),
        ["B-start", "B-end", "A-start", "A-end"],
        "{stderr}"
    );
}
