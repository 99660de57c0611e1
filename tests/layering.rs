//! The layering lib.rs describes is the real one: no cycles between the
//! top-level modules of src/, and the run path never reaches the
//! inspection code (`holder`/`check`).
//!
//! Read from the source text: every `crate::NAME` a file mentions is an
//! edge from the file's top-level module to NAME. A re-export in lib.rs
//! counts as an edge to where it points, not as a module of its own.

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

/// The modules a file's code refers to as `crate::NAME`, leaving out
/// comments and tests.
fn references(text: &str) -> BTreeSet<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or(text);
    let mut found = BTreeSet::new();
    for line in code.lines() {
        let line = line.split("//").next().unwrap_or("");
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.insert(name);
            }
        }
    }
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
