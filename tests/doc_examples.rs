//! Every example a user can copy runs as written (issue 32 item 1): the
//! `sh` and `cron` blocks of README.md and docs/*.md, the EXAMPLES of the
//! man page and the examples of `--help`. A crontab line runs as cron runs
//! it, with `PATH=/usr/bin:/bin` and nothing else in the environment, so an
//! example that leaves out a full path fails here, not in someone's mail.
//!
//! Each example runs in a directory of its own. Paths that belong to the
//! system (`/var/lock`, `/run/lock`, `/tmp`, `/usr/local/bin`, `/usr/bin/lockrun`,
//! `/usr/local/share`, `/mnt/shared`, `/var/lib/node_exporter`) are moved into it, `lockrun` is installed in its
//! `bin/`, and the programs the examples call (`backup.sh`, `make`, `sudo`
//! ...) are stubs that note that they ran and under which lock. A block
//! exits 0 unless the line before it says otherwise:
//!
//! ```text
//! <!-- example: exits 75 -->
//! <!-- example: not run: needs an etcd server (tests/etcd.rs runs these) -->
//! ```
//!
//! A block not run says why, and names where it is tested if it is. What
//! this does not run: shown output (blocks without `sh`/`cron`, and `$ `
//! transcripts), whose words the tests of each message check.

// Unix: the examples are sh and cron; tests/windows.rs is the Windows suite.
#![cfg(unix)]

mod common;

use common::*;
use std::path::Path;
use std::process::{Command, Stdio};

#[derive(Debug)]
struct Example {
    /// `README.md:57`: where the block starts.
    place: String,
    cron: bool,
    text: String,
    /// `Err(reason)`: marked as not run here.
    expect: Result<i32, String>,
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The fenced `sh` and `cron` blocks of a Markdown file, with their marks.
fn markdown_examples(file: &str) -> Vec<Example> {
    let text = std::fs::read_to_string(root().join(file)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let Some(info) = line.strip_prefix("```") else {
            i += 1;
            continue;
        };
        let start = i;
        let end = (i + 1..lines.len())
            .find(|&j| lines[j].starts_with("```"))
            .unwrap_or_else(|| panic!("{file}:{}: a block that never ends", i + 1));
        i = end + 1;
        let cron = match info.trim() {
            "sh" | "bash" | "shell" => false,
            "cron" => true,
            _ => continue,
        };
        let mark = lines[..start]
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .and_then(|l| l.trim().strip_prefix("<!-- example:"))
            .and_then(|l| l.strip_suffix("-->"))
            .map(str::trim);
        let expect = match mark {
            None => Ok(0),
            Some(m) => match (m.strip_prefix("exits "), m.strip_prefix("not run:")) {
                (Some(code), _) => Ok(code.trim().parse().unwrap_or_else(|_| {
                    panic!("{file}:{}: `exits` needs a number: {m}", start + 1)
                })),
                (_, Some(why)) if !why.trim().is_empty() => Err(why.trim().to_owned()),
                _ => panic!("{file}:{}: an example mark says nothing: {m}", start + 1),
            },
        };
        found.push(Example {
            place: format!("{file}:{}", start + 1),
            cron,
            text: lines[start + 1..end].join("\n"),
            expect,
        });
    }
    found
}

/// The man page's EXAMPLES: each `.EX`/`.EE` display, its roff escapes
/// undone. A line that starts with five time fields is a crontab line.
fn man_examples(file: &str) -> Vec<Example> {
    let text = std::fs::read_to_string(root().join(file)).unwrap();
    let Some((_, examples)) = text.split_once(".SH EXAMPLES") else {
        return Vec::new();
    };
    let examples = examples.split("\n.SH ").next().unwrap_or_default();
    let mut found = Vec::new();
    for (n, block) in examples.split(".EX\n").skip(1).enumerate() {
        let body = block.split("\n.EE").next().unwrap_or_default();
        let body = body
            .replace("\\-", "-")
            .replace("\\(aq", "'")
            .replace("\\(dq", "\"")
            .replace("\\e", "\\")
            .replace("\\\\", "\\");
        found.push(Example {
            place: format!("{file}: EXAMPLES display {}", n + 1),
            cron: body.lines().all(is_cron_line),
            text: body,
            expect: Ok(0),
        });
    }
    found
}

/// `--help`'s examples: the indented lines under `Examples:`, each its own
/// example; the line that introduces a crontab line is not one.
fn help_examples() -> Vec<Example> {
    let out = std_lockrun().arg("--help").output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let Some((_, rest)) = help.split_once("\nExamples:\n") else {
        panic!("--help has no Examples: {help}");
    };
    rest.lines()
        .take_while(|l| l.starts_with("  "))
        .map(str::trim)
        .filter(|l| !l.ends_with(':') && !l.ends_with("):"))
        .enumerate()
        .map(|(n, line)| Example {
            place: format!("--help example {}", n + 1),
            cron: is_cron_line(line),
            text: line.to_owned(),
            expect: Ok(0),
        })
        .collect()
}

fn is_cron_line(line: &str) -> bool {
    let fields: Vec<&str> = line.split_whitespace().collect();
    fields.len() > 5
        && fields[..5]
            .iter()
            .all(|f| f.chars().all(|c| c.is_ascii_digit() || "*/,-".contains(c)))
}

/// The programs the examples call, as stubs: each notes its name, its
/// arguments and the lock it runs under (`LOCKRUN_LOCKFILE`) in `ran`.
const STUBS: &[&str] = &[
    "backup.sh",
    "sync.sh",
    "job.sh",
    "deploy.sh",
    "start-daemon.sh",
    "train.py",
    "export.sh",
    "make",
    "rsync",
    "git",
    "critical-section",
];

/// A directory that stands in for the system: `lock/`, `tmp/`, `share/`,
/// `bin/` (lockrun and the stubs a full path names), `stubs/` (the rest,
/// first on PATH), and `sudo`, which only runs its command.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = temp_dir();
        let path = dir.path();
        for sub in [
            "lock",
            "tmp",
            "share",
            "shared",
            "bin",
            "stubs",
            "node_exporter",
            "node_exporter/textfile_collector",
        ] {
            std::fs::create_dir(path.join(sub)).unwrap();
        }
        std::os::unix::fs::symlink(bin(), path.join("bin/lockrun")).unwrap();
        // The completions and man pages an install example copies.
        for sub in ["completions", "man"] {
            std::os::unix::fs::symlink(root().join(sub), path.join(sub)).unwrap();
        }
        let ran = path.join("ran");
        for name in STUBS {
            let stub = format!(
                "#!/bin/sh\necho \"{name} $* (lock: ${{LOCKRUN_LOCKFILE:-none}})\" >> '{}'\n",
                ran.display()
            );
            // Where a full path finds it, where PATH does, and where `./` does.
            for place in [path.join("bin"), path.join("stubs"), path.to_owned()] {
                write_executable(&place.join(name), &stub);
            }
        }
        write_executable(&path.join("stubs/sudo"), "#!/bin/sh\nexec \"$@\"\n");
        Sandbox { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The example with the system's paths moved into the sandbox.
    fn localize(&self, text: &str) -> String {
        let here = self.path().display();
        // One pass: the sandbox itself may be under /tmp.
        let moves = [
            ("/usr/bin/lockrun", "bin/lockrun"),
            ("/usr/local/bin/", "bin/"),
            ("/usr/local/share/", "share/"),
            ("/var/lock/", "lock/"),
            ("/run/lock/", "lock/"),
            ("/tmp/", "tmp/"),
            // A file system several hosts share (the README's jobs).
            ("/mnt/shared/", "shared/"),
            // node_exporter's textfile directory (the guide's --metrics-file).
            ("/var/lib/node_exporter/", "node_exporter/"),
        ];
        let mut out = String::new();
        let mut rest = text;
        'scan: while !rest.is_empty() {
            for (from, to) in moves {
                if let Some(after) = rest.strip_prefix(from) {
                    out.push_str(&format!("{here}/{to}"));
                    rest = after;
                    continue 'scan;
                }
            }
            let c = rest.chars().next().unwrap_or_default();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
        out
    }

    fn ran(&self) -> String {
        std::fs::read_to_string(self.path().join("ran")).unwrap_or_default()
    }

    /// Runs the example: a crontab line as cron does (`sh -c`, PATH
    /// /usr/bin:/bin, no other environment), a shell block as a script with
    /// `sh -e`. Returns the status and what it printed.
    fn run(&self, example: &Example) -> (Option<i32>, String) {
        let text = self.localize(&example.text);
        let home = self.path().display().to_string();
        let mut statuses = Vec::new();
        let mut printed = String::new();
        let mut scripts: Vec<(Command, String)> = Vec::new();
        if example.cron {
            for line in text
                .lines()
                .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            {
                let command: String = line
                    .split_whitespace()
                    .skip(5)
                    .collect::<Vec<_>>()
                    .join(" ");
                let mut cmd = Command::new("/bin/sh");
                cmd.env_clear()
                    .env("PATH", "/usr/bin:/bin")
                    .env("HOME", &home)
                    .env("SHELL", "/bin/sh")
                    .args(["-c", &command]);
                scripts.push((cmd, line.to_owned()));
            }
        } else {
            // Executable: an example may lock and run itself ("$0").
            let script = self.path().join("example.sh");
            write_executable(&script, &text);
            let mut cmd = Command::new("/bin/sh");
            let path = format!("{home}/stubs:{home}/bin:/usr/bin:/bin");
            cmd.env("PATH", path)
                .env("HOME", &home)
                .arg("-e")
                .arg(&script);
            scripts.push((cmd, text.clone()));
        }
        for (mut cmd, what) in scripts {
            let child = cmd
                .current_dir(self.path())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let out = wait_output(child, &what);
            printed.push_str(&String::from_utf8_lossy(&out.stdout));
            printed.push_str(&String::from_utf8_lossy(&out.stderr));
            statuses.push(out.status.code());
        }
        let status = statuses
            .iter()
            .find(|s| **s != Some(0))
            .copied()
            .unwrap_or(Some(0));
        (status, printed)
    }
}

fn write_executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Waits for an example within the suite's bound; one that hangs is killed
/// and reported as such.
fn wait_output(mut child: std::process::Child, what: &str) -> std::process::Output {
    let deadline = std::time::Instant::now() + BOUND;
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("an example did not finish within {BOUND:?}: {what}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn all_examples() -> Vec<Example> {
    let mut all = Vec::new();
    for file in [
        "README.md",
        "docs/GUIDE.md",
        "docs/FAQ.md",
        "docs/LOCK-URLS.md",
    ] {
        all.extend(markdown_examples(file));
    }
    all.extend(man_examples("man/lockrun.1"));
    all.extend(help_examples());
    all
}

#[test]
fn every_example_runs_as_written() {
    let examples = all_examples();
    let mut failures = Vec::new();
    let mut ran = 0;
    for example in &examples {
        let Ok(expected) = example.expect else {
            continue;
        };
        let sandbox = Sandbox::new();
        let (status, printed) = sandbox.run(example);
        ran += 1;
        if status != Some(expected) {
            failures.push(format!(
                "{}: exited {status:?}, the text says {expected}\n{}\n--- it printed:\n{printed}",
                example.place, example.text
            ));
        } else if !sandbox.ran().is_empty() && !sandbox.ran().contains("(lock: ") {
            failures.push(format!(
                "{}: a stub ran oddly: {}",
                example.place,
                sandbox.ran()
            ));
        }
    }
    let not_run = examples.iter().filter(|e| e.expect.is_err()).count();
    println!("{ran} examples ran; {not_run} not run, each saying why");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // The count moves when examples are added or marked: it must never
    // fall to nothing because the extraction broke.
    assert!(
        ran >= 15,
        "only {ran} examples were found to run: {examples:#?}"
    );
}

/// Every example not run says why; the crontab ones are all run.
#[test]
fn examples_not_run_say_why_and_cron_lines_are_all_run() {
    for example in all_examples() {
        if let Err(why) = &example.expect {
            assert!(why.len() > 10, "{}: say why it is not run", example.place);
            assert!(
                !example.cron,
                "{}: a crontab example must run",
                example.place
            );
        }
    }
}

/// The check can fail: a crontab line without the full paths cron needs
/// exits 127, and the stubs say under which lock they ran.
#[test]
fn a_cron_line_without_full_paths_fails_here() {
    let sandbox = Sandbox::new();
    let line = Example {
        place: "control".into(),
        cron: true,
        text: "*/5 * * * * lockrun -n -q /var/lock/sync.lock sync.sh".into(),
        expect: Ok(0),
    };
    assert_eq!(sandbox.run(&line).0, Some(127));
    let full = Example {
        text: "*/5 * * * * /usr/local/bin/lockrun -n -q /var/lock/sync.lock /usr/local/bin/sync.sh"
            .into(),
        ..line
    };
    assert_eq!(sandbox.run(&full).0, Some(0));
    let ran = sandbox.ran();
    assert!(
        ran.starts_with("sync.sh  (lock: ") && ran.contains("/lock/sync.lock)"),
        "{ran}"
    );
}
