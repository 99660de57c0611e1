//! The shell completions under `completions/` and the man pages under `man/`
//! describe the default build (no lock URLs): the completions are what
//! clap_complete generates from `lockrun::cli::command_for(false)`, the man
//! pages what `lockrun::generate::man_pages(false)` writes. The default
//! binary prints these very files for `--generate` (it compiles them in).
//!
//! Shared by `examples/generate-docs.rs`, which writes the files, and
//! `tests/generated_docs.rs`, which fails when the committed files are out of
//! date. Output depends only on the CLI definition and the crate version, so
//! it is the same on every machine and with every feature set.

use clap_complete::{Generator, Shell};
use std::path::Path;

/// The name users type, which the completions register for.
const BIN_NAME: &str = "lockrun";

/// The directories (relative to the crate root) that hold only generated
/// files.
pub const OUTPUT_DIRS: [&str; 2] = ["completions", "man"];

/// The shells, with the `--generate` name of each.
pub const SHELLS: [(Shell, &str); 5] = [
    (Shell::Bash, "complete-bash"),
    (Shell::Zsh, "complete-zsh"),
    (Shell::Fish, "complete-fish"),
    (Shell::Elvish, "complete-elvish"),
    (Shell::PowerShell, "complete-powershell"),
];

/// A completion script for a build with or without lock URLs.
pub fn completion(shell: Shell, with_etcd: bool) -> Vec<u8> {
    let mut cmd = lockrun::cli::command_for(with_etcd);
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, BIN_NAME, &mut script);
    // lockrun's wrapper around clap's script (the command after the lock
    // file completes as that command), as `--generate` writes it.
    let kind = match shell {
        Shell::Bash => lockrun::generate::Kind::CompleteBash,
        Shell::Zsh => lockrun::generate::Kind::CompleteZsh,
        Shell::Fish => lockrun::generate::Kind::CompleteFish,
        Shell::Elvish => lockrun::generate::Kind::CompleteElvish,
        _ => lockrun::generate::Kind::CompletePowershell,
    };
    lockrun::generate::completion::finish(kind, &cmd, script)
}

/// The file a shell's completions are committed as.
pub fn completion_path(shell: Shell) -> String {
    format!("completions/{}", shell.file_name(BIN_NAME))
}

/// Every generated file as (path relative to the crate root, with `/`
/// separators; contents).
pub fn generate() -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    for (shell, _) in SHELLS {
        files.push((completion_path(shell), completion(shell, false)));
    }
    for (path, page) in lockrun::generate::man_pages(false) {
        files.push((path, page.into_bytes()));
    }
    files
}

/// Files in the output directories under `root` that `generated` does not
/// contain, i.e. left over from an older CLI (say, a removed subcommand).
pub fn leftover_files(root: &Path, generated: &[(String, Vec<u8>)]) -> Vec<String> {
    let mut leftovers = Vec::new();
    for dir in OUTPUT_DIRS {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = format!("{dir}/{}", entry.file_name().to_string_lossy());
            if !generated.iter().any(|(path, _)| *path == name) {
                leftovers.push(name);
            }
        }
    }
    leftovers.sort();
    leftovers
}
