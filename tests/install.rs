//! install.sh's own options (issue 32, items 5 and 7): `--help` prints
//! install.sh's usage without building, and `--uninstall` removes exactly
//! what an install put under PREFIX, naming each file.
//!
//! The install here copies the binary this test suite built
//! (`LOCKRUN_BIN`), not a release build of its own: the build is what
//! .ci/run's install step checks, and takes minutes.
// Unix: install.sh is a POSIX shell script.
#![cfg(unix)]

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn install_sh() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("install.sh")
}

/// `sh install.sh ARGS` with PREFIX=`prefix` and the test's lockrun as
/// the binary to install.
fn run(prefix: &Path, args: &[&str]) -> Output {
    let out = Command::new("sh")
        .arg(install_sh())
        .args(args)
        .env("PREFIX", prefix)
        .env("LOCKRUN_BIN", env!("CARGO_BIN_EXE_lockrun"))
        .env_remove("DESTDIR")
        .output()
        .expect("run install.sh");
    assert!(
        out.status.success(),
        "install.sh {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Every file and directory under `dir`, relative to it, sorted.
fn tree(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .display()
                .to_string();
            if path.is_dir() {
                out.push(format!("{name}/"));
                walk(root, &path, out);
            } else {
                out.push(name);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

const INSTALLED: [&str; 8] = [
    "bin/lockrun",
    "share/bash-completion/completions/lockrun",
    "share/fish/vendor_completions.d/lockrun.fish",
    "share/lockrun/installed-files",
    "share/man/man1/lockrun-check.1",
    "share/man/man1/lockrun-holder.1",
    "share/man/man1/lockrun.1",
    "share/zsh/site-functions/_lockrun",
];

#[test]
fn help_prints_install_sh_usage_without_building() {
    // No cargo on this PATH: --help must not need it (it used to go to
    // cargo, and the "musl build failed").
    let out = Command::new("sh")
        .arg(install_sh())
        .arg("--help")
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("run install.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.starts_with("install.sh: build lockrun's"),
        "{stdout}"
    );
    for word in [
        "--uninstall",
        "PREFIX=DIR",
        "DESTDIR=DIR",
        "LOCKRUN_BIN=FILE",
    ] {
        assert!(stdout.contains(word), "no {word} in:\n{stdout}");
    }
    assert!(
        !stdout.contains("set -eu"),
        "the script itself printed:\n{stdout}"
    );
    assert!(stderr.is_empty(), "{stderr}");
}

#[test]
fn uninstall_removes_exactly_what_the_install_put_there() {
    let dir = temp_dir();
    // A space in PREFIX, and a directory that was there before the install
    // and must stay, with a file of someone else's in it.
    let prefix = dir.path().join("usr local");
    std::fs::create_dir_all(prefix.join("share/man/man1")).expect("mkdir");
    std::fs::write(prefix.join("share/man/man1/other.1"), "").expect("write");
    let before = tree(&prefix);

    let out = run(&prefix, &[]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("installed-files"), "{said}");
    let mut files: Vec<String> = tree(&prefix)
        .into_iter()
        .filter(|p| !p.ends_with('/') && !before.contains(p))
        .collect();
    files.sort();
    assert_eq!(files, INSTALLED);
    let list = std::fs::read_to_string(prefix.join("share/lockrun/installed-files")).expect("read");
    for file in INSTALLED {
        assert!(
            list.lines().any(|l| Path::new(l) == prefix.join(file)),
            "{file} not in the list:\n{list}"
        );
    }
    // Installed again over it: the list still names the directories the
    // first install created.
    run(&prefix, &[]);

    let out = run(&prefix, &["--uninstall"]);
    let said = String::from_utf8_lossy(&out.stdout);
    for file in INSTALLED {
        let line = format!("removed {}", prefix.join(file).display());
        assert!(said.lines().any(|l| l == line), "no {line:?} in:\n{said}");
    }
    assert_eq!(tree(&prefix), before, "left behind, or removed too much");

    // Nothing left to remove: it says so, and still succeeds.
    let out = run(&prefix, &["--uninstall"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("nothing of lockrun's"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(tree(&prefix), before);
}

#[test]
fn uninstall_leaves_a_listed_path_outside_prefix_alone() {
    let dir = temp_dir();
    let prefix = dir.path().join("p");
    run(&prefix, &[]);
    let outside = dir.path().join("precious");
    std::fs::write(&outside, "keep").expect("write");
    let list = prefix.join("share/lockrun/installed-files");
    let mut text = std::fs::read_to_string(&list).expect("read");
    text.insert_str(0, &format!("{}\n", outside.display()));
    std::fs::write(&list, text).expect("write");
    let out = run(&prefix, &["--uninstall"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not under"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&outside).ok().as_deref(),
        Some("keep")
    );
    assert!(tree(&prefix).is_empty(), "{:?}", tree(&prefix));
}
