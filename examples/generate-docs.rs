//! Writes the shell completions (`completions/`) and man pages (`man/`)
//! generated from lockrun's clap definition into the crate root:
//!
//!     cargo run --example generate-docs
//!
//! Run it after every change to the command line (src/cli.rs) or the crate
//! version, and commit the result; `tests/generated_docs.rs` fails until the
//! committed files match.

#[cfg(unix)]
#[path = "../tests/support/generated_docs.rs"]
mod generated_docs;

#[cfg(unix)]
use std::path::Path;
use std::process::ExitCode;

/// The man pages and completions describe the Unix command line.
#[cfg(windows)]
fn main() -> ExitCode {
    eprintln!("generate-docs: run it on Unix, where the documented command line is built");
    ExitCode::FAILURE
}

#[cfg(unix)]
fn main() -> ExitCode {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = generated_docs::generate();
    let mut failed = false;

    for dir in generated_docs::OUTPUT_DIRS {
        if let Err(e) = std::fs::create_dir_all(root.join(dir)) {
            eprintln!("generate-docs: cannot create {dir}/: {e}");
            return ExitCode::FAILURE;
        }
    }

    for (path, contents) in &files {
        let target = root.join(path);
        let unchanged = std::fs::read(&target).is_ok_and(|old| old == *contents);
        if unchanged {
            println!("unchanged {path}");
        } else if let Err(e) = std::fs::write(&target, contents) {
            eprintln!("generate-docs: cannot write {path}: {e}");
            failed = true;
        } else {
            println!("wrote     {path}");
        }
    }

    // The output directories hold generated files only: anything else there
    // is left over from an older CLI.
    for path in generated_docs::leftover_files(root, &files) {
        match std::fs::remove_file(root.join(&path)) {
            Ok(()) => println!("removed   {path} (no longer generated)"),
            Err(e) => {
                eprintln!("generate-docs: cannot remove stale {path}: {e}");
                failed = true;
            }
        }
    }

    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
