//! The committed shell completions and man pages must be exactly what the
//! current CLI definition generates.

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
