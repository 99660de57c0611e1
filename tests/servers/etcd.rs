//! A private etcd (one member, or a cluster of them) for the lock-URL
//! tests; see tests/servers/mod.rs.

pub use super::pki::Pki;
use super::{AtExit, free_port};
use crate::common::*;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How a test's etcd is set up.
#[derive(Default)]
pub struct Setup<'a> {
    pub tls: Option<&'a Pki>,
    pub client_cert_auth: bool,
    pub extra: Vec<String>,
    /// A second loopback address member 0 also listens on (same port):
    /// one the server certificate does not name.
    pub also_on: Option<&'a str>,
}

/// One etcd member, killed on drop.
pub struct Member {
    pub child: Child,
    pub endpoint: String,
    /// Its `--name`: unique to this test's cluster, so that readiness can
    /// tell this member from another test's etcd on the same port.
    pub name: String,
    pub log: std::path::PathBuf,
    /// To start it again, on the same ports and data.
    pub args: Vec<String>,
}

impl Drop for Member {
    fn drop(&mut self) {
        // A member that already exited cannot be continued: no assertion
        // here (a panic in a destructor during a failed test aborts every
        // test of the file).
        // SAFETY: kill(2) on our own unreaped child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGCONT) };
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A private etcd (one member, or a cluster), with its own data directory.
pub struct Etcd {
    pub members: Vec<Member>,
    pub endpoint: String,
    pub scheme: &'static str,
    /// Variables every lockrun and etcdctl of the test gets (TLS files).
    pub env: Vec<(String, String)>,
    pub _dir: tempfile::TempDir,
}

pub fn spawn_etcd(args: &[String], log: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("etcd log");
    // A process group of its own: tests SIGSTOP a member, and a stopped
    // process in the harness's own group makes the kernel send SIGHUP to
    // that whole group (cargo included) as soon as anything in it exits,
    // when the group is orphaned, as under `setsid` or a CI runner's
    // session: every test then dies of a hang-up.
    let child = Command::new("etcd")
        .args(args)
        .stdout(Stdio::null())
        .stderr(log)
        .process_group(0)
        .spawn()
        .expect("start etcd");
    // Ahead of the crowd of lockruns and of whatever else runs on the
    // machine (CI builds beside the suite): a member starved of CPU misses
    // heartbeats and elections drag on (3.85 s after SIGCONT at load 8 on
    // 2 cores), which makes a leaderless spell outlast the TTL a test
    // chose to be longer than it. The servers are the environment under
    // test, not lockrun: lockrun keeps the ordinary priority. Only root
    // may raise a priority; others run as before.
    // SAFETY: setpriority has no memory preconditions.
    // `as _`: the two arguments' C types differ between glibc and the BSDs.
    unsafe { libc::setpriority(libc::PRIO_PROCESS as _, child.id() as _, -10) };
    child
}

/// What a member's start came to.
pub enum Started {
    /// It answers, and it is ours.
    Ready,
    /// It exited because a port was taken (by another test) before it
    /// bound it.
    PortTaken,
}

impl Etcd {
    /// `None` (after a loud skip) when etcd is not installed.
    pub fn start() -> Option<Etcd> {
        Etcd::start_with(&Setup::default(), 1)
    }

    /// `members` members on loopback. A port found free and closed may be
    /// taken by another test before etcd binds it: then etcd exits saying
    /// so, and the whole cluster starts again on new ports.
    pub fn start_with(setup: &Setup, members: usize) -> Option<Etcd> {
        if !needs("etcd", "Debian: apt-get install etcd-server")
            || !needs("etcdctl", "Debian: apt-get install etcd-client")
        {
            return None;
        }
        for _ in 0..5 {
            if let Some(etcd) = Etcd::try_start(setup, members) {
                return Some(etcd);
            }
        }
        panic!("etcd never started: ports taken every time");
    }

    pub fn try_start(setup: &Setup, n: usize) -> Option<Etcd> {
        let dir = temp_dir();
        // The temp dir's name is unique on this machine: it names this
        // test's cluster and members, which readiness then checks.
        let token = dir
            .path()
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .expect("temp dir name");
        let scheme = if setup.tls.is_some() { "https" } else { "http" };
        // Distinct, or etcd refuses the cluster ("has duplicate url"): a
        // port found free and closed can come back from the next probe.
        let mut seen = std::collections::BTreeSet::new();
        let mut distinct = || loop {
            let port = free_port();
            if seen.insert(port) {
                return port;
            }
        };
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (distinct(), distinct())).collect();
        let cluster = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{i}-{token}=http://127.0.0.1:{peer}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut env = Vec::new();
        if let Some(pki) = setup.tls {
            env.push(("LOCKRUN_ETCD_CACERT".to_owned(), pki.file("ca.pem")));
            if setup.client_cert_auth {
                env.push(("LOCKRUN_ETCD_CERT".to_owned(), pki.file("client.pem")));
                env.push(("LOCKRUN_ETCD_KEY".to_owned(), pki.file("client.key")));
            }
        }
        let mut started = Vec::new();
        for (i, (client, peer)) in ports.iter().enumerate() {
            let client_url = format!("{scheme}://127.0.0.1:{client}");
            let listen = match setup.also_on {
                Some(other) if i == 0 => format!("{client_url},{scheme}://{other}:{client}"),
                _ => client_url.clone(),
            };
            let peer_url = format!("http://127.0.0.1:{peer}");
            let log = dir.path().join(format!("etcd{i}.log"));
            let name = format!("m{i}-{token}");
            let mut args = vec![
                format!("--name={name}"),
                format!("--initial-cluster-token={token}"),
                format!(
                    "--data-dir={}",
                    dir.path().join(format!("data{i}")).display()
                ),
                format!("--listen-client-urls={listen}"),
                format!("--advertise-client-urls={client_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster={cluster}"),
            ];
            args.extend(setup.extra.iter().cloned());
            if let Some(pki) = setup.tls {
                args.push(format!("--cert-file={}", pki.file("server.pem")));
                args.push(format!("--key-file={}", pki.file("server.key")));
                if setup.client_cert_auth {
                    args.push("--client-cert-auth".into());
                    args.push(format!("--trusted-ca-file={}", pki.file("ca.pem")));
                }
            }
            started.push(Member {
                child: spawn_etcd(&args, &log),
                endpoint: format!("127.0.0.1:{client}"),
                name,
                log,
                args,
            });
        }
        let mut etcd = Etcd {
            endpoint: started[0].endpoint.clone(),
            members: started,
            scheme,
            env,
            _dir: dir,
        };
        let deadline = Instant::now() + BOUND;
        for at in 0..n {
            match etcd.await_member(at, 0, deadline) {
                Started::Ready => {}
                Started::PortTaken => return None,
            }
        }
        Some(etcd)
    }

    /// Waits until member `at` answers as itself: etcdctl's member list,
    /// asked of its endpoint, names it (its test-unique name) with that
    /// endpoint, and lockrun can read through it (`check` says free, 1).
    /// Any etcd on the port would pass lockrun's check alone: another
    /// test's server that took the port first. `since`: where in its log
    /// this start began.
    pub fn await_member(&mut self, at: usize, since: usize, deadline: Instant) -> Started {
        let url = format!("etcd://{}/ready", self.members[at].endpoint);
        loop {
            if self.answers_as_itself(at) {
                let mut check = self.std_lockrun();
                if check
                    .args(["check", "-q", &url])
                    .status()
                    .is_ok_and(|s| s.code() == Some(1))
                {
                    return Started::Ready;
                }
            }
            let member = &mut self.members[at];
            let log = std::fs::read(&member.log).unwrap_or_default();
            let log = String::from_utf8_lossy(log.get(since..).unwrap_or_default()).into_owned();
            if let Ok(Some(status)) = member.child.try_wait() {
                if log.contains("address already in use") {
                    return Started::PortTaken;
                }
                panic!("etcd member {} exited ({status}):\n{log}", member.name);
            }
            assert!(
                Instant::now() < deadline,
                "etcd member {} did not answer in time:\n{log}",
                member.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether the etcd answering on member `at`'s endpoint lists that
    /// member, by its name, with that endpoint as its client URL.
    pub fn answers_as_itself(&self, at: usize) -> bool {
        let member = &self.members[at];
        let Ok(out) = self
            .etcdctl_at(&member.endpoint)
            .args(["member", "list", "-w", "json"])
            .output()
        else {
            return false;
        };
        let Ok(list) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else {
            return false;
        };
        let url = format!("{}://{}", self.scheme, member.endpoint);
        list["members"].as_array().is_some_and(|all| {
            all.iter().any(|m| {
                m["name"] == member.name.as_str()
                    && m["clientURLs"]
                        .as_array()
                        .is_some_and(|urls| urls.iter().any(|u| *u == url.as_str()))
            })
        })
    }

    pub fn url(&self, name: &str) -> String {
        format!("etcd://{}/{name}", self.endpoint)
    }

    /// A URL naming the members in this order.
    pub fn url_via(&self, order: &[usize], name: &str) -> String {
        let list: Vec<&str> = order
            .iter()
            .map(|&i| self.members[i].endpoint.as_str())
            .collect();
        format!("etcd://{}/{name}", list.join(","))
    }

    pub fn signal(&self, sig: &str) {
        self.signal_member(0, sig);
    }

    pub fn signal_member(&self, at: usize, sig: &str) {
        kill(self.members[at].child.id() as i32, sig);
    }

    /// SIGKILL, then the same member again on its ports and data; returns
    /// once it answers as itself.
    pub fn kill_and_restart(&mut self, at: usize) {
        self.kill_member(at);
        self.restart_member(at);
    }

    pub fn kill_member(&mut self, at: usize) {
        let member = &mut self.members[at];
        let _ = member.child.kill();
        let _ = member.child.wait();
    }

    /// Starts a killed member again on its own ports. Its ports were free
    /// while it was down, so another test may have bound one meanwhile
    /// (a free-port probe, or an etcd about to fail on it): then it
    /// starts again once the port is free, within the bound.
    pub fn restart_member(&mut self, at: usize) {
        let deadline = Instant::now() + BOUND;
        loop {
            let member = &mut self.members[at];
            let since = std::fs::metadata(&member.log)
                .map(|m| m.len() as usize)
                .unwrap_or(0);
            member.child = spawn_etcd(&member.args, &member.log);
            match self.await_member(at, since, deadline) {
                Started::Ready => return,
                Started::PortTaken => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    pub fn clean(&self, cmd: &mut Command) {
        for (var, _) in std::env::vars() {
            if var.starts_with("ETCDCTL_") || var.starts_with("LOCKRUN_ETCD_") {
                cmd.env_remove(var);
            }
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
    }

    pub fn std_lockrun(&self) -> Command {
        let mut cmd = std_lockrun();
        self.clean(&mut cmd);
        cmd
    }

    pub fn lockrun(&self) -> assert_cmd::Command {
        assert_cmd::Command::from_std(self.std_lockrun())
    }

    /// etcdctl (with the TLS files) talking to `endpoint` only.
    pub fn etcdctl_at(&self, endpoint: &str) -> Command {
        let mut cmd = Command::new("etcdctl");
        self.clean(&mut cmd);
        cmd.env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}://{endpoint}", self.scheme));
        for (var, flag) in [
            ("LOCKRUN_ETCD_CACERT", "--cacert"),
            ("LOCKRUN_ETCD_CERT", "--cert"),
            ("LOCKRUN_ETCD_KEY", "--key"),
        ] {
            if let Some((_, v)) = self.env.iter().find(|(k, _)| k == var) {
                cmd.arg(format!("{flag}={v}"));
            }
        }
        cmd
    }

    /// etcdctl as root (with the TLS files), for setting etcd up.
    pub fn etcdctl(&self, args: &[&str]) {
        self.etcdctl_out(args);
    }

    pub fn etcdctl_out(&self, args: &[&str]) -> String {
        let out = self
            .etcdctl_at(&self.endpoint)
            .args(args)
            .output()
            .expect("run etcdctl");
        assert!(
            out.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Users and roles: `root` (password rootpw) and `app` (apppw) with
    /// read-write on the lock name `job` and everything under it.
    pub fn enable_auth(&self) {
        for args in [
            &["user", "add", "root:rootpw"][..],
            &["user", "grant-role", "root", "root"],
            &["role", "add", "lockers"],
            &[
                "role",
                "grant-permission",
                "lockers",
                "--prefix=true",
                "readwrite",
                "job",
            ],
            &["user", "add", "app:apppw"],
            &["user", "grant-role", "app", "lockers"],
            &["auth", "enable"],
        ] {
            self.etcdctl(args);
        }
    }

    pub fn etcdctl_as_root(&self, args: &[&str]) {
        let mut all = vec!["--user=root:rootpw"];
        all.extend(args);
        self.etcdctl(&all);
    }
}

/// The etcd the ordinary tests of a binary share (see tests/servers/mod.rs).
pub fn shared() -> Option<&'static Etcd> {
    static SERVER: OnceLock<Option<(Etcd, AtExit)>> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            let etcd = Etcd::start()?;
            let at_exit = AtExit::kill(etcd.members[0].child.id(), etcd._dir.path());
            Some((etcd, at_exit))
        })
        .as_ref()
        .map(|(etcd, _)| etcd)
}
