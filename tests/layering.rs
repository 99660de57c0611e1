//! The layering lib.rs describes is the real one: no cycles between the
//! top-level modules of src/, and the run path never reaches the
//! inspection code (`holder`/`check`).
//!
//! Read from the source text: every `crate::NAME` a file mentions is an
//! edge from the file's top-level module to NAME. A re-export in lib.rs
//! counts as an edge to where it points, not as a module of its own.
// Unix: these spawn sh, read /proc and send signals; tests/windows.rs is
// the Windows suite.
#![cfg(unix)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/backend/file/lock.rs` -> `backend`.
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "main")).then(|| name.to_owned())
}

/// The code of a file without its comments, the contents of its string
/// and character literals, and its `#[cfg(test)] mod tests` block: what is
/// left is what the build links. (A `//` in a string is not a comment; a
/// lifetime `'a` is not a character literal.)
fn code_only(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '/' if chars.get(i + 1) == Some(&'/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if chars.get(i + 1) == Some(&'*') => {
                i += 2;
                while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                    i += 1;
                }
                i += 2;
            }
            '"' => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            // A character literal ('x', '\n', '\''), not a lifetime.
            '\'' if chars.get(i + 2) == Some(&'\'') => i += 3,
            '\'' if chars.get(i + 1) == Some(&'\\') => {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// The modules a file's code refers to as `crate::NAME`, or in a group,
/// `crate::{a::x, b}`.
fn references(text: &str) -> BTreeSet<String> {
    let code = code_only(text);
    let ident = |text: &str| -> String {
        text.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level items of the group: split at commas outside braces.
            let mut depth = 0;
            let mut start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        found.insert(ident(&group[start..i]));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        found.insert(ident(&group[start..i]));
                        start = i + 1;
                    }
                    _ => {}
                }
            }
        } else {
            found.insert(ident(rest));
        }
    }
    found.remove("");
    found
}

/// lib.rs's `pub use a::b;` / `pub use a::{b, c};`: `b` stands for `a`.
fn aliases(lib: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for line in lib.lines() {
        let Some(path) = line.trim().strip_prefix("pub use ") else {
            continue;
        };
        let path = path.trim_end_matches(';');
        let target = path.split("::").next().unwrap_or("").to_owned();
        let names = match path.split_once('{') {
            Some((_, list)) => list.trim_end_matches('}').to_owned(),
            None => path.rsplit("::").next().unwrap_or("").to_owned(),
        };
        for name in names.split(',') {
            map.insert(name.trim().to_owned(), target.clone());
        }
    }
    map
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
    let alias = aliases(&lib);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let Some(from) = top_module(&src, &file) else {
            continue;
        };
        let text = std::fs::read_to_string(&file).expect("read source");
        let entry = edges.entry(from.clone()).or_default();
        for name in references(&text) {
            let to = alias.get(&name).cloned().unwrap_or(name);
            if to != from {
                entry.insert(to);
            }
        }
    }
    edges
}

fn reaches(edges: &BTreeMap<String, BTreeSet<String>>, from: &str, to: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from.to_owned()];
    while let Some(at) = todo.pop() {
        for next in edges.get(&at).into_iter().flatten() {
            if next == to {
                return true;
            }
            if seen.insert(next.clone()) {
                todo.push(next.clone());
            }
        }
    }
    false
}

#[test]
fn no_cycles_between_top_level_modules() {
    let edges = graph();
    let mut cycles = Vec::new();
    for (from, tos) in &edges {
        for to in tos {
            if reaches(&edges, to, from) {
                cycles.push(format!("{from} -> {to} -> ... -> {from}"));
            }
        }
    }
    assert!(cycles.is_empty(), "module cycles:\n{}", cycles.join("\n"));
}

/// The bottom layer lib.rs names (the record, identity, display, ...,
/// platform) is below everything: it reaches none of the modules above it.
#[test]
fn the_bottom_layer_reaches_nothing_above_it() {
    let edges = graph();
    let above = ["cli", "generate", "run", "backend", "inspect", "report"];
    let bottom = [
        "record",
        "identity",
        "display",
        "sanitize",
        "mode",
        "persona",
        "exit_codes",
        "sync",
        "platform",
    ];
    let mut wrong = Vec::new();
    for low in bottom {
        for high in above {
            if reaches(&edges, low, high) {
                wrong.push(format!("{low} reaches {high}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The reader itself: grouped imports, strings and comments.
#[test]
fn the_reader_sees_grouped_imports_and_skips_strings_and_comments() {
    let text = "use crate::{a::X, b, c::{D, E}};\n\
                let s = \"// crate::in_string\"; crate::after_string::f();\n\
                // crate::in_comment\n\
                /* crate::in_block */ fn f<'a>(x: &'a str) -> char { crate::g::h(); '\"' }\n";
    let found: Vec<String> = references(text).into_iter().collect();
    assert_eq!(found, ["a", "after_string", "b", "c", "g"]);
}

#[test]
fn the_run_path_never_reaches_the_inspection_code() {
    let edges = graph();
    for inspection in ["inspect", "report"] {
        assert!(
            !reaches(&edges, "run", inspection),
            "run reaches {inspection}"
        );
    }
}

/// lockrun writes every line through `say!` (src/lib.rs) or a checked
/// write: std's `println!` and `eprintln!` panic when the write fails (a
/// full disk, a closed pipe where SIGPIPE is ignored), which aborts a run
/// that still holds the lock and owes the record its end.
#[test]
fn no_print_macro_that_panics_on_a_failed_write() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read source");
        let code = code_only(&text);
        for (n, line) in code.lines().enumerate() {
            if line.contains("println!(") || line.contains("print!(") {
                found.push(format!("{}:{}", file.display(), n + 1));
            }
        }
    }
    assert!(found.is_empty(), "print macros that panic: {found:?}");
}
