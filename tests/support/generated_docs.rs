//! The shell completions under `completions/` and the man pages under `man/`,
//! generated from the clap definition (`lockrun::cli::command()`).
//!
//! Shared by `examples/generate-docs.rs`, which writes the files, and
//! `tests/generated_docs.rs`, which fails when the committed files are out of
//! date. Output depends only on the CLI definition and the crate version, so
//! it is the same on every machine.

use clap_complete::{Generator, Shell};
use clap_mangen::Man;
use std::path::Path;

/// The name users type, which the completions register for.
const BIN_NAME: &str = "lockrun";

/// The directories (relative to the crate root) that hold only generated
/// files.
pub const OUTPUT_DIRS: [&str; 2] = ["completions", "man"];

/// Every generated file as (path relative to the crate root, with `/`
/// separators; contents).
pub fn generate() -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();

    for shell in [
        Shell::Bash,
        Shell::Zsh,
        Shell::Fish,
        Shell::Elvish,
        Shell::PowerShell,
    ] {
        let mut cmd = lockrun::cli::command();
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut cmd, BIN_NAME, &mut script);
        files.push((format!("completions/{}", shell.file_name(BIN_NAME)), script));
    }

    // Building the top-level command first gives each subcommand its display
    // name (`lockrun-holder`, for the page's title and file name) and its bin
    // name (`lockrun holder`, for the synopsis), as clap_mangen::generate_to
    // does. Every page names the same source in its footer, "lockrun 0.1.0"; left
    // to itself clap_mangen would put just "holder " on a subcommand's page,
    // which has no version of its own.
    let mut cmd = lockrun::cli::command();
    cmd.build();
    let source = format!("{BIN_NAME} {}", cmd.get_version().unwrap_or_default());
    let mut pages = vec![Man::new(cmd.clone())];
    pages.extend(
        cmd.get_subcommands()
            .filter(|sub| !sub.is_hide_set())
            .map(|sub| Man::new(sub.clone())),
    );
    let pages = pages.into_iter().map(|page| page.source(source.clone()));
    for page in pages {
        let mut roff = Vec::new();
        page.render(&mut roff)
            .expect("rendering a man page into memory cannot fail");
        files.push((format!("man/{}", page.get_filename()), roff));
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
