//! Helpers for cross-process tests: real processes, synchronised on
//! readiness (a line on a pipe, an entry in the kernel's lock table), every
//! wait bounded so a broken build fails instead of hanging.
#![allow(dead_code)]

pub mod meter;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

pub const BOUND: Duration = Duration::from_secs(20);

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_lockrun")
}

/// The built lockrun, with a bound on how long it may run.
pub fn lockrun() -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::new(bin());
    cmd.timeout(BOUND);
    cmd
}

pub fn std_lockrun() -> Command {
    Command::new(bin())
}

pub fn has(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// A process running in the background whose stdout lines we can wait for.
/// Killed (SIGKILL) and reaped on drop.
pub struct Background {
    pub child: Child,
    lines: Receiver<String>,
    pub stdin: Option<ChildStdin>,
    /// Where the process's stderr went when the test did not ask for it:
    /// a file, not the test's own stderr, so that a passing run prints no
    /// stray `lockrun:` line (a killed lockrun's watchdog, a holder's
    /// message). Shown if the test fails.
    stderr_log: Option<std::fs::File>,
}

impl Background {
    pub fn spawn(mut cmd: Command) -> Background {
        cmd.stdout(Stdio::piped()).stdin(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn background process");
        let stdout = child.stdout.take().expect("stdout");
        let stdin = child.stdin.take();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Background {
            child,
            lines: rx,
            stdin,
            stderr_log: None,
        }
    }

    /// [`Background::spawn`] with stderr kept in a file ([`Background::stderr_text`]).
    pub fn spawn_quiet(mut cmd: Command) -> Background {
        let log = tempfile::tempfile().expect("a file for the stderr of a background process");
        cmd.stderr(log.try_clone().expect("a second descriptor of that file"));
        let mut bg = Background::spawn(cmd);
        bg.stderr_log = Some(log);
        bg
    }

    /// What the process (and whatever inherited its stderr) wrote to
    /// stderr so far, when started by [`Background::spawn_quiet`].
    pub fn stderr_text(&self) -> String {
        use std::io::{Read, Seek};
        let Some(log) = &self.stderr_log else {
            return String::new();
        };
        let mut log = log;
        let mut text = String::new();
        let _ = log.seek(std::io::SeekFrom::Start(0));
        let _ = log.read_to_string(&mut text);
        text
    }

    /// lockrun holding `lock` while running `sh -c SCRIPT`; waits for the
    /// script to print `ready` (so the lock is held) and returns the words
    /// after it.
    pub fn lockrun_holding(args: &[&str], lock: &Path, script: &str) -> (Background, Vec<String>) {
        let mut cmd = std_lockrun();
        cmd.args(args).arg(lock).args(["--", "sh", "-c", script]);
        let bg = Background::spawn_quiet(cmd);
        let words = bg.expect_ready();
        (bg, words)
    }

    pub fn expect_ready(&self) -> Vec<String> {
        let line = self.line(BOUND).unwrap_or_else(|| {
            panic!(
                "holder never printed `ready`; its stderr: {}",
                self.stderr_text()
            )
        });
        let mut words = line.split_whitespace().map(str::to_owned);
        assert_eq!(
            words.next().as_deref(),
            Some("ready"),
            "unexpected line {line:?}"
        );
        words.collect()
    }

    pub fn line(&self, within: Duration) -> Option<String> {
        self.lines.recv_timeout(within).ok()
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends a line to the process's stdin (a holder waiting on `read`).
    pub fn release(&mut self) {
        if let Some(stdin) = &mut self.stdin {
            let _ = stdin.write_all(b"go\n");
            let _ = stdin.flush();
        }
    }

    pub fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        wait_child(&mut self.child, within)
    }

    pub fn has_exited(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_some()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let text = self.stderr_text();
            if !text.is_empty() {
                eprintln!("--- stderr of background pid {}:\n{text}", self.pid());
            }
        }
        // Its children first (lockrun's command, a shell's lockrun): left
        // behind they would hold the lock, and the test's output pipe, long
        // after the test.
        // Only while it is not yet reaped: a reaped process's pid can be
        // given to any other process (pid_max may be as low as 32768), and
        // "its" children would then be someone else's.
        if let Ok(None) = self.child.try_wait() {
            let pid = self.pid();
            let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"));
            for child in children.unwrap_or_default().split_whitespace() {
                if let Ok(child) = child.parse::<i32>() {
                    kill_if_child_of(child, pid, libc::SIGKILL);
                }
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `condition` (a cheap look at kernel or file state, not a guess
/// about timing) until it holds, failing the test after `BOUND`.
/// Reaps `child`, failing the test if it has not exited within `within`.
pub fn wait_child(child: &mut std::process::Child, within: Duration) -> ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "process {} did not exit in {within:?}",
            child.id()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

pub fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + BOUND;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn dev_ino(path: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).expect("stat lock file");
    (meta.dev(), meta.ino())
}

/// `maj:min:ino` as /proc/locks writes it.
fn lock_id(path: &Path) -> String {
    let (dev, ino) = dev_ino(path);
    let major = ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff);
    let minor = ((dev >> 12) & 0xffff_ff00) | (dev & 0xff);
    format!("{major:02x}:{minor:02x}:{ino}")
}

/// How many processes the kernel shows blocked waiting on `path`.
pub fn kernel_waiters(path: &Path) -> usize {
    kernel_entries(path, true)
}

pub fn kernel_holders(path: &Path) -> usize {
    kernel_entries(path, false)
}

/// How many flock entries hold PATH, for an exact count (`== 1`): the
/// count three readings in a row agree on. A single reading of a long,
/// changing /proc/locks can skip an entry or show one twice (test.sh runs
/// tests/conditions.rs' churn beside the others: a lock taken once read
/// as 2); three agreeing readings do not come from tearing, and a lock
/// really taken twice reads 2 every time.
pub fn kernel_holders_settled(path: &Path) -> usize {
    settled(|| kernel_entries_once(path, false))
}

/// [`kernel_holders_settled`] for the waiters.
pub fn kernel_waiters_settled(path: &Path) -> usize {
    settled(|| kernel_entries_once(path, true))
}

fn settled(mut read: impl FnMut() -> usize) -> usize {
    let mut last = read();
    let mut agreeing = 1;
    for _ in 0..100 {
        let now = read();
        agreeing = if now == last { agreeing + 1 } else { 1 };
        last = now;
        if agreeing == 3 {
            break;
        }
    }
    last
}

/// The entries of one reading of /proc/locks on PATH's inode.
fn kernel_entries_once(path: &Path, waiting: bool) -> usize {
    // The trailing space keeps inode 123 from matching inode 1234.
    let id = format!("{} ", lock_id(path));
    std::fs::read_to_string("/proc/locks")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" -> ") == waiting && l.contains(&id))
        .count()
}

/// The most entries seen over two readings: the kernel serves /proc/locks
/// a page per read and can skip an entry when other locks come and go
/// between reads (other tests run in parallel), or show one twice: count
/// with `>=` where more than one cannot be told from a duplicate.
fn kernel_entries(path: &Path, waiting: bool) -> usize {
    (0..2)
        .map(|_| kernel_entries_once(path, waiting))
        .max()
        .unwrap_or(0)
}

pub fn kill(pid: i32, signal: &str) {
    let status = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid} failed");
}

/// The parent of `pid` (field 4 of /proc/PID/stat), `None` when gone.
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Sends `signal` to `pid` only if it is still a child of `parent`, a
/// process the test has not reaped: a pid read earlier may have been
/// given to another process since (another test's, or another job's on
/// this machine), which a bare kill would hit.
pub fn kill_if_child_of(pid: i32, parent: i32, signal: i32) {
    if pid > 0 && parent_of(pid) == Some(parent) {
        // SAFETY: kill(2) on a child of a process this test started and
        // has not reaped, so its pid is still that process's.
        unsafe { libc::kill(pid, signal) };
    }
}

/// The state letter of /proc/PID/stat (`R`, `S`, `Z`, …), `None` when gone.
pub fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.trim_start().chars().next()
}

pub fn process_gone(pid: i32) -> bool {
    // A zombie still has /proc/PID; count it as gone.
    matches!(process_state(pid), None | Some('Z'))
}

/// Asleep (state S): a poller between two attempts, say.
pub fn wait_asleep(what: &str, pid: i32) {
    wait_for(what, || process_state(pid) == Some('S'));
}

pub fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("lockrun-test")
        .tempdir()
        .expect("temp dir")
}

pub fn lock_in(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("test.lock")
}

pub fn record_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).expect("read lock file");
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("record {text:?}: {e}"))
}

/// Waits until `pid` has exec'd `program` (a script prints `ready` just
/// before its `exec`, so the new command line may lag a moment).
pub fn wait_exec(pid: impl ToString, program: &str) {
    let pid = pid.to_string();
    wait_for(&format!("pid {pid} to exec {program}"), || {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| c.starts_with(format!("{program}\0").as_bytes()))
            .unwrap_or(false)
    });
}

/// Says loudly that a test could not run here. Under CI
/// (LOCKRUN_TEST_REQUIRE_ALL set by .ci/run) a skip is a failure instead.
///
/// The harness captures `eprintln!` and shows it only for a failing test,
/// so a skip would pass unseen: the line goes to the terminal itself when
/// there is one, else straight to file descriptor 2 (which the harness does
/// not capture), so that `cargo test` in a pipe or CI log shows it too.
pub fn skip(why: &str) {
    if std::env::var_os("LOCKRUN_TEST_REQUIRE_ALL").is_some() {
        panic!("this test must run in CI but cannot: {why}");
    }
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    let line = format!("\n*** SKIPPED {test}: {why} ***\n");
    let shown = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/tty")
        .and_then(|mut tty| tty.write_all(line.as_bytes()));
    if shown.is_err() {
        let _ = std::io::stderr().write_all(line.as_bytes());
    }
}

/// A python3 process holding `n` flock(2) locks on files of its own in
/// `dir` (`other0`, `other1`, ...) until dropped: enough of them (a few
/// hundred) make /proc/locks longer than a page, read in several parts.
/// Callers check `needs("python3", ...)` first.
#[allow(dead_code)]
pub fn hold_other_locks(dir: &Path, n: usize) -> Background {
    let mut cmd = Command::new("python3");
    cmd.args([
        "-c",
        "import fcntl,os,sys\nfs=[open(os.path.join(sys.argv[1],'other%d'%i),'w') for i in range(int(sys.argv[2]))]\n\
         [fcntl.flock(f,fcntl.LOCK_EX) for f in fs]\nprint('ready',flush=True)\nsys.stdin.readline()",
    ])
    .arg(dir)
    .arg(n.to_string());
    let others = Background::spawn(cmd);
    others.expect_ready();
    others
}

/// Builds the C program `source` with cc into `dir/name` (with `args`
/// before the source, e.g. `-shared -fPIC` for a preload shim, and `libs`
/// after it), and returns its path. Callers check `needs("cc", ...)` first.
#[allow(dead_code)]
pub fn build_c(dir: &Path, name: &str, source: &str, args: &[&str], libs: &[&str]) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    let out = dir.join(name);
    std::fs::write(&c, source).unwrap();
    let built = Command::new("cc")
        .args(args)
        .arg("-o")
        .arg(&out)
        .arg(&c)
        .args(libs)
        .status()
        .unwrap();
    assert!(built.success(), "cc could not build {name}");
    out
}

/// Whether `tool` is installed; says SKIPPED (or fails under CI) if not.
pub fn needs(tool: &str, why: &str) -> bool {
    if has(tool) {
        return true;
    }
    skip(&format!("{tool} is not installed ({why})"));
    false
}

/// Whether tests can run lockrun as an unprivileged user (root + setpriv).
pub fn can_drop_privileges() -> bool {
    if rustix::process::geteuid().is_root() && has("setpriv") {
        return true;
    }
    skip("needs root and setpriv to run lockrun as an unprivileged user");
    false
}

/// lockrun run as user and group nobody (see [`can_drop_privileges`]).
pub fn lockrun_as_nobody() -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", bin()]);
    cmd
}

/// util-linux flock(1) holding `lock` while `sh -c 'echo ready $$; exec
/// sleep 60'` runs; returns it and the pid of the shell (then sleep), which
/// holds the lock too.
pub fn flock_holding(flock_args: &[&str], lock: &Path) -> (Background, i32) {
    let mut cmd = Command::new("flock");
    cmd.args(flock_args)
        .arg(lock)
        .args(["sh", "-c", "echo ready $$; exec sleep 60"]);
    let flock = Background::spawn(cmd);
    let words = flock.expect_ready();
    let pid = words[0].parse().expect("pid");
    (flock, pid)
}

/// `lockrun holder --json TARGET`, which must succeed, parsed.
pub fn holder_json(target: impl AsRef<std::ffi::OsStr>) -> serde_json::Value {
    let out = lockrun()
        .args(["holder", "--json"])
        .arg(target)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// `lockrun holder TARGET`, which must succeed: its text.
pub fn holder_text(target: impl AsRef<std::ffi::OsStr>) -> String {
    let out = lockrun().arg("holder").arg(target).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `lockrun -n LOCK true`: is the lock free right now? (`.success()`) or
/// held (`.code(75)`).
pub fn try_lock_now(lock: &Path) -> assert_cmd::assert::Assert {
    lockrun().arg("-n").arg(lock).arg("true").assert()
}

/// A file system mounted for one test (root only), unmounted on drop:
/// tmpfs, a btrfs on a loop device, an overlay, a bind mount.
pub struct Mount {
    pub dir: tempfile::TempDir,
    /// Loop devices to detach after unmounting.
    cleanup: Vec<Vec<String>>,
    /// What this mount stands on (an overlay's tmpfs, a btrfs image's
    /// directory): dropped after it.
    _under: Option<Box<dyn std::any::Any>>,
}

impl Mount {
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    fn run(args: &[&str]) -> Result<String, String> {
        let out = Command::new(args[0])
            .args(&args[1..])
            .output()
            .map_err(|e| format!("{}: {e}", args[0]))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        } else {
            Err(format!(
                "`{}` failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    fn root(what: &str) -> bool {
        if rustix::process::geteuid().is_root() {
            return true;
        }
        skip(&format!("mounting {what} needs root"));
        false
    }

    /// Says SKIPPED (or fails under CI) when it cannot mount.
    fn or_skip(what: &str, made: Result<Mount, String>) -> Option<Mount> {
        match made {
            Ok(mount) => Some(mount),
            Err(why) => {
                skip(&format!("cannot mount {what}: {why}"));
                None
            }
        }
    }

    pub fn tmpfs() -> Option<Mount> {
        if !Mount::root("a tmpfs") {
            return None;
        }
        let dir = temp_dir();
        let made = Mount::run(&[
            "mount",
            "-t",
            "tmpfs",
            "-o",
            "size=8m",
            "tmpfs",
            path_str(&dir),
        ])
        .map(|_| Mount {
            dir,
            cleanup: Vec::new(),
            _under: None,
        });
        Mount::or_skip("a tmpfs", made)
    }

    /// A fresh btrfs on a loop device, with a subvolume `sub` in it: a
    /// subvolume's files stat with a device of their own, not the file
    /// system's.
    pub fn btrfs() -> Option<Mount> {
        if !Mount::root("a btrfs")
            || !needs("mkfs.btrfs", "btrfs-progs, to test on btrfs")
            || !needs("losetup", "util-linux losetup, to test on btrfs")
        {
            return None;
        }
        let image_dir = temp_dir();
        let image = image_dir.path().join("btrfs.img");
        let made = (|| {
            let file = std::fs::File::create(&image).map_err(|e| e.to_string())?;
            file.set_len(128 << 20).map_err(|e| e.to_string())?;
            let image = image.to_str().ok_or("path")?;
            Mount::run(&["mkfs.btrfs", "-q", "-f", image])?;
            let device = Mount::run(&["losetup", "--find", "--show", image])?;
            let dir = temp_dir();
            let mount = Mount {
                dir,
                cleanup: vec![vec!["losetup".into(), "-d".into(), device.clone()]],
                _under: None,
            };
            Mount::run(&["mount", "-t", "btrfs", &device, path_str(&mount.dir)])?;
            let sub = mount.path().join("sub");
            Mount::run(&["btrfs", "subvolume", "create", sub.to_str().ok_or("path")?])?;
            Ok(mount)
        })();
        let made = made.map(|mut mount| {
            mount._under = Some(Box::new(image_dir));
            mount
        });
        Mount::or_skip("a btrfs on a loop device", made)
    }

    /// An overlay whose lower layer holds `lower.lock`, all on a tmpfs.
    pub fn overlay() -> Option<Mount> {
        let base = Mount::tmpfs()?;
        let made = (|| {
            for sub in ["lower", "upper", "work"] {
                std::fs::create_dir(base.path().join(sub)).map_err(|e| e.to_string())?;
            }
            std::fs::write(base.path().join("lower/lower.lock"), b"").map_err(|e| e.to_string())?;
            let dir = temp_dir();
            let options = format!(
                "lowerdir={0}/lower,upperdir={0}/upper,workdir={0}/work",
                base.path().display()
            );
            Mount::run(&[
                "mount",
                "-t",
                "overlay",
                "overlay",
                "-o",
                &options,
                path_str(&dir),
            ])?;
            Ok(dir)
        })();
        let made = made.map(|dir| Mount {
            dir,
            cleanup: Vec::new(),
            _under: Some(Box::new(base)),
        });
        Mount::or_skip("an overlay", made)
    }

    /// `source` mounted a second time, at another path.
    pub fn bind(source: &Path) -> Option<Mount> {
        if !Mount::root("a bind mount") {
            return None;
        }
        let dir = temp_dir();
        let source = source.to_str().expect("utf-8 path");
        let made = Mount::run(&["mount", "--bind", source, path_str(&dir)]).map(|_| Mount {
            dir,
            cleanup: Vec::new(),
            _under: None,
        });
        Mount::or_skip("a bind mount", made)
    }
}

fn path_str(dir: &tempfile::TempDir) -> &str {
    dir.path().to_str().expect("utf-8 temp path")
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
        for step in &self.cleanup {
            let _ = Command::new(&step[0]).args(&step[1..]).status();
        }
    }
}

/// lockrun with ARGS as pid 1 of a new PID namespace (a container's view).
pub fn in_child_pid_namespace(args: &[&str]) -> std::process::Output {
    Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", bin()])
        .args(args)
        .output()
        .expect("run unshare")
}

/// Whether a new PID namespace can be made here (root); says SKIPPED if not.
pub fn pid_namespaces_work() -> bool {
    let works = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !works {
        skip("unshare --pid --fork --mount-proc does not work here (needs root)");
    }
    works
}

/// A FIFO at PATH with a writer blocked in open(2) until a reader comes:
/// whatever opens the FIFO wakes it.
pub fn fifo_with_blocked_writer(path: &Path) -> Child {
    let made = Command::new("mkfifo").arg(path).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo {path:?}");
    let writer = Command::new("sh")
        .args(["-c", r#"echo payload > "$P""#])
        .env("P", path)
        .spawn()
        .expect("spawn the FIFO's writer");
    wait_asleep("the writer to block in open", writer.id() as i32);
    writer
}

/// The FIFO's writer was never woken: a reader now gets its payload.
pub fn fifo_writer_still_blocked(path: &Path, mut writer: Child) {
    assert!(
        writer.try_wait().expect("try_wait").is_none(),
        "the FIFO was opened and its writer woken"
    );
    let out = Command::new("timeout")
        .args(["10", "cat"])
        .arg(path)
        .output()
        .expect("run cat");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "payload\n");
    assert!(writer.wait().expect("wait").success());
}

/// The threads of `pid` other than its main thread on which one of the
/// signals lockrun forwards is not blocked, by name, and how many threads
/// were looked at. lockrun's handlers write to a pipe only the main thread
/// knows to be open: no other thread may run them.
pub fn threads_taking_signals(pid: u32) -> (Vec<String>, usize) {
    let forwarded = [
        libc::SIGHUP,
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGTERM,
        libc::SIGUSR1,
        libc::SIGUSR2,
    ];
    let mut open = Vec::new();
    let mut seen = 0;
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("read the task list");
    for task in tasks.flatten() {
        if task.file_name().to_str() == Some(pid.to_string().as_str()) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
                .unwrap_or("")
                .to_owned()
        };
        let blocked = u64::from_str_radix(&field("SigBlk:"), 16).unwrap_or(0);
        seen += 1;
        if forwarded.iter().any(|&sig| blocked & (1 << (sig - 1)) == 0) {
            open.push(format!("{} ({:x})", field("Name:"), blocked));
        }
    }
    (open, seen)
}

/// A loopback port that refuses connections for as long as the returned
/// descriptor lives: a TCP socket bound to it that never listens. Unlike a
/// port found free and closed again, no other test's server can take it
/// meanwhile and answer in its place.
pub fn refusing_port() -> (std::os::fd::OwnedFd, u16) {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket calls on a descriptor this function owns; the
    // address structs are local and fully initialised.
    unsafe {
        #[cfg(not(target_vendor = "apple"))]
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        // macOS has no SOCK_CLOEXEC: the flag is set right after.
        #[cfg(target_vendor = "apple")]
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        #[cfg(target_vendor = "apple")]
        assert_eq!(libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC), 0);
        let owned = std::os::fd::OwnedFd::from_raw_fd(fd);
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let bound = libc::bind(fd, (&raw const addr).cast(), len);
        assert_eq!(bound, 0, "bind: {}", std::io::Error::last_os_error());
        let mut len = len;
        libc::getsockname(fd, (&raw mut addr).cast(), &mut len);
        (owned, u16::from_be(addr.sin_port))
    }
}

/// utime + stime of `pid`, in clock ticks (fields 14 and 15 of its stat);
/// 0 once it is gone.
pub fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit(')')
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|f| f.parse::<u64>().expect("a tick count"))
        .sum()
}

/// How often the threads of `pid` went to sleep and woke: voluntary
/// context switches only. A nonvoluntary one is a preemption while
/// running, which CPU hogs beside the test multiply without the waiter
/// doing more.
pub fn wakeups(pid: i32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .map(|task| std::fs::read_to_string(task.path().join("status")).unwrap_or_default())
        .flat_map(|status| {
            status
                .lines()
                .filter_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .filter_map(|v| v.trim().parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}
