//! The committed shell completions and man pages must be exactly what the
//! current CLI definition generates.
// Unix: these spawn sh, read /proc and send signals; tests/windows.rs is
// the Windows suite.
#![cfg(unix)]

#[path = "support/generated_docs.rs"]
mod generated_docs;

use std::path::Path;

#[test]
fn completions_and_man_pages_are_up_to_date() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = generated_docs::generate();
    let mut stale = Vec::new();

    for (path, expected) in &files {
        match std::fs::read(root.join(path)) {
            Ok(actual) if actual == *expected => {}
            Ok(_) => stale.push(format!("  {path}: differs from what the CLI generates")),
            Err(e) => stale.push(format!("  {path}: cannot read it: {e}")),
        }
    }
    for path in generated_docs::leftover_files(root, &files) {
        stale.push(format!("  {path}: no longer generated"));
    }

    assert!(
        stale.is_empty(),
        "the generated completions/man pages are out of date with the CLI:\n{}\n\
         run `cargo run --example generate-docs` and commit the result",
        stale.join("\n")
    );
}

/// `lockrun --generate KIND` prints the man page and completions of the
/// binary as built: for the default build, exactly the committed files.
#[test]
fn generate_prints_the_man_page_and_completions_of_this_build() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let etcd = lockrun::registry::built().next().is_some();
    let mut expected: Vec<(&str, String, Vec<u8>)> = Vec::new();
    let man = lockrun::generate::man_pages(etcd).remove(0);
    expected.push(("man", man.0, man.1.into_bytes()));
    for (shell, kind) in generated_docs::SHELLS {
        expected.push((
            kind,
            generated_docs::completion_path(shell),
            generated_docs::completion(shell, etcd),
        ));
    }
    for (kind, path, contents) in expected {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lockrun"))
            .args(["--generate", kind])
            .output()
            .expect("run lockrun");
        assert!(out.status.success(), "--generate {kind}: {out:?}");
        assert!(
            out.stdout == contents,
            "--generate {kind} differs from what this build generates"
        );
        if !etcd {
            let file = std::fs::read(root.join(&path)).expect("read the committed file");
            assert!(out.stdout == file, "--generate {kind} differs from {path}");
        }
    }
}

/// A build without lock URLs does not advertise them.
#[test]
fn the_default_builds_docs_name_no_lock_urls() {
    let files = generated_docs::generate();
    for (path, contents) in &files {
        let text = String::from_utf8_lossy(contents);
        // Not --kill-grace: it goes with --max-time on lock files too.
        for word in ["etcd", "ttl", "FENCING"] {
            assert!(!text.contains(word), "{path} mentions {word}");
        }
    }
    let mut help = lockrun::cli::command_for(false);
    let mut helps = vec![help.render_long_help().to_string()];
    if lockrun::registry::built().next().is_none() {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lockrun"))
            .arg("--help")
            .output()
            .expect("run lockrun");
        helps.push(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    for help in helps {
        for word in ["etcd", "--ttl"] {
            assert!(
                !help.contains(word),
                "--help of the default build mentions {word}"
            );
        }
    }
}

/// Every build's `--help` and man page name each lock URL backend it has,
/// by its URL and its own words, and none it lacks (`--features etcd`
/// alone says nothing of postgres://, and the reverse).
#[test]
fn help_and_man_page_name_exactly_the_backends_built() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lockrun"))
        .arg("--help")
        .output()
        .expect("run lockrun");
    assert!(out.status.success(), "{out:?}");
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lockrun"))
        .args(["--generate", "man"])
        .output()
        .expect("run lockrun");
    let man = String::from_utf8_lossy(&out.stdout).replace("\\-", "-");
    let mut any = false;
    for (built, words) in lockrun::registry::all() {
        any |= built;
        let scheme = words.url.split("://").next().expect("a scheme");
        let scheme = format!("{scheme}://");
        for (what, text) in [("--help", &help), ("the man page", &man)] {
            assert_eq!(
                text.contains(&scheme),
                built,
                "{what} {} {scheme}",
                if built { "lacks" } else { "advertises" }
            );
        }
        // clap wraps --help at 80 columns: compare with whitespace runs as
        // one space.
        let flat = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
        if built {
            assert!(
                flat(&help).contains(&flat(words.help_exit)),
                "--help lacks {}",
                words.help_exit
            );
        }
    }
    assert_eq!(help.contains("--ttl"), any, "--ttl in --help");
    assert_eq!(man.contains("--ttl"), any, "--ttl in the man page");
}
