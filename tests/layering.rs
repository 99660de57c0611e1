//! The layering the code describes is the real one: no module cycles at
//! any depth, the run path never reaches the inspection code
//! (`holder`/`check`) nor the registry, and the file path never reaches a
//! lock URL's backend.
//!
//! Read from the source text. The module tree is built from lib.rs by
//! following `mod NAME;` declarations (and their `#[path = "..."]`, as a
//! disabled twin module is declared), so every file is the module the
//! compiler makes of it. An edge goes from a module to every module its
//! code names: `crate::a::b`, `super::x`, `self::y`, grouped or not
//! (`super::{a, b::{C, d}}`), in a `use` or inside an expression. A path
//! names the deepest module it reaches (`crate::backend::etcd::client::X`
//! is `backend::etcd::client`). A re-export in lib.rs counts as an edge to
//! where it points.
//!
//! "No cycles at any depth": for every module, its children (each standing
//! for itself and everything below it) depend on each other without a
//! cycle. At the top that is the old rule (no two top-level modules depend
//! on each other); below it, e.g. `backend::etcd::client` and
//! `backend::etcd::keeper` may not name each other. A child naming its own
//! parent or an ancestor (a backend's files naming `backend`'s traits, or
//! a folder's mod.rs that re-exports its children) is not a cycle between
//! siblings: the parent is above them.
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

/// A module's path from the crate root: `["backend", "etcd", "client"]`.
type ModPath = Vec<String>;

/// The code of a file without its comments, the contents of its string
/// and character literals, and its `#[cfg(test)] mod tests` block: what is
/// left is what the build links. (A `//` in a string is not a comment; a
/// lifetime `'a` is not a character literal.) Raw strings `r"..."` and
/// `r#"..."#` are skipped whole.
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
            'r' if (chars.get(i + 1) == Some(&'"') || chars.get(i + 1) == Some(&'#'))
                && !chars
                    .get(i.wrapping_sub(1))
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_') =>
            {
                let mut hashes = 0;
                let mut j = i + 1;
                while chars.get(j) == Some(&'#') {
                    hashes += 1;
                    j += 1;
                }
                if chars.get(j) != Some(&'"') {
                    out.push('r');
                    i += 1;
                    continue;
                }
                j += 1;
                loop {
                    if j >= chars.len() {
                        break;
                    }
                    if chars[j] == '"' && (0..hashes).all(|k| chars.get(j + 1 + k) == Some(&'#')) {
                        j += 1 + hashes;
                        break;
                    }
                    j += 1;
                }
                out.push_str("\"\"");
                i = j;
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

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every full path a use-tree starting at `text` spells, each with `prefix`
/// in front: `a::{b, c::{D, e}}, f` read from after `crate::` gives
/// `a::b`, `a::c::D`, `a::c::e` (the group ends at its closing brace, or
/// the tree at the first character that is not part of a path).
fn expand(text: &str, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let bytes: Vec<char> = text.chars().collect();
    let mut i = 0;
    let skip_ws = |i: &mut usize| {
        while *i < bytes.len() && bytes[*i].is_whitespace() {
            *i += 1;
        }
    };
    let mut path = prefix.to_vec();
    loop {
        skip_ws(&mut i);
        if bytes.get(i) == Some(&'{') {
            i += 1;
            loop {
                skip_ws(&mut i);
                if bytes.get(i) == Some(&'}') {
                    i += 1;
                    break;
                }
                let rest: String = bytes[i..].iter().collect();
                i += expand(&rest, &path, out);
                skip_ws(&mut i);
                match bytes.get(i) {
                    Some(',') => i += 1,
                    Some('}') => {
                        i += 1;
                        break;
                    }
                    _ => break,
                }
            }
            return i;
        }
        let start = i;
        while i < bytes.len() && is_ident(bytes[i]) {
            i += 1;
        }
        if i == start {
            out.push(path);
            return i;
        }
        path.push(bytes[start..i].iter().collect());
        if bytes.get(i) == Some(&':') && bytes.get(i + 1) == Some(&':') {
            i += 2;
        } else {
            out.push(path);
            return i;
        }
    }
}

/// The paths a module's code names, made absolute (from the crate root):
/// `crate::…`, `super::…` (any number of them), `self::…`.
fn named_paths(code: &str, module: &ModPath) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let before_ok = i == 0 || !(is_ident(chars[i - 1]) || chars[i - 1] == ':');
        let rest: String = chars[i..chars.len().min(i + 7)].iter().collect();
        let (base, len) = if before_ok && rest.starts_with("crate::") {
            (Some(Vec::new()), 7)
        } else if before_ok && rest.starts_with("super::") {
            let mut base = module.clone();
            let mut len = 0;
            let tail: String = chars[i..].iter().collect();
            let mut t = tail.as_str();
            while let Some(r) = t.strip_prefix("super::") {
                base.pop();
                len += 7;
                t = r;
            }
            (Some(base), len)
        } else if before_ok && rest.starts_with("self::") {
            (Some(module.clone()), 6)
        } else {
            (None, 0)
        };
        match base {
            Some(base) => {
                let tail: String = chars[i + len..].iter().collect();
                let used = expand(&tail, &base, &mut out);
                i += len + used.max(1);
            }
            None => i += 1,
        }
    }
    out
}

/// The module tree: every module lib.rs leads to, with its file's code.
fn modules() -> BTreeMap<ModPath, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = BTreeMap::new();
    // (module, its file, the directory its children's files are in)
    let mut todo = vec![(Vec::new(), src.join("lib.rs"), src.clone())];
    while let Some((module, file, dir)) = todo.pop() {
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let code = code_only(&text);
        let file_dir = file.parent().expect("a file's directory").to_path_buf();
        let mut path_attr: Option<()> = None;
        for line in code.lines() {
            let line = line.trim();
            // The string literal's contents are gone from `code`: read the
            // attribute from the original text of the same line.
            if line.starts_with("#[path") {
                path_attr = Some(());
                continue;
            }
            if line.starts_with("#[") {
                continue;
            }
            let decl = line
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub(super) ")
                .trim_start_matches("pub ");
            if let Some(name) = decl.strip_prefix("mod ").and_then(|n| n.strip_suffix(';')) {
                let name = name.trim().to_owned();
                let mut child = module.clone();
                child.push(name.clone());
                let child_file = match path_attr.take() {
                    Some(_) => file_dir.join(path_of(&text, &name)),
                    None if dir.join(format!("{name}.rs")).exists() => {
                        dir.join(format!("{name}.rs"))
                    }
                    None => dir.join(&name).join("mod.rs"),
                };
                let child_dir = if child_file.ends_with("mod.rs") {
                    child_file.parent().expect("dir").to_path_buf()
                } else {
                    child_file.with_extension("")
                };
                todo.push((child, child_file, child_dir));
            } else {
                path_attr = None;
            }
        }
        found.insert(module, code);
    }
    found
}

/// The `#[path = "..."]` given right before `mod NAME;` in `text`.
fn path_of(text: &str, name: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    for (n, line) in lines.iter().enumerate() {
        let decl = line
            .trim()
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub ");
        if decl == format!("mod {name};") {
            for before in lines[..n].iter().rev() {
                let before = before.trim();
                if let Some(rest) = before.strip_prefix("#[path") {
                    let quoted = rest.split('"').nth(1).expect("a quoted path");
                    return quoted.to_owned();
                }
                if !before.starts_with("#[") {
                    break;
                }
            }
        }
    }
    panic!("no #[path] for mod {name}")
}

/// Which module each module's code names, each path resolved to the
/// deepest module it reaches; lib.rs's `pub use a::b` makes `crate::b`
/// name `a`.
fn graph() -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let mods = modules();
    let lib = mods.get(&Vec::new()).cloned().unwrap_or_default();
    let alias = aliases(&lib);
    let mut edges: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for (module, code) in &mods {
        let entry = edges.entry(module.clone()).or_default();
        for mut path in named_paths(code, module) {
            if let Some(first) = path.first()
                && let Some(to) = alias.get(first)
                && !mods.contains_key(&vec![first.clone()])
            {
                path[0] = to.clone();
            }
            let mut target = path;
            while !target.is_empty() && !mods.contains_key(&target) {
                target.pop();
            }
            if !target.is_empty() && &target != module {
                entry.insert(target);
            }
        }
    }
    edges
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

/// Every cycle among siblings, at every depth: for each module, its
/// children (each standing for its whole subtree) and the edges between
/// them.
fn sibling_cycles(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<String> {
    let parents: BTreeSet<ModPath> = edges
        .keys()
        .filter(|m| !m.is_empty())
        .map(|m| m[..m.len() - 1].to_vec())
        .collect();
    let mut cycles = Vec::new();
    for parent in parents {
        let depth = parent.len();
        let child_of = |m: &ModPath| -> Option<ModPath> {
            (m.len() > depth && m[..depth] == parent[..]).then(|| m[..=depth].to_vec())
        };
        let mut level: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
        for (from, tos) in edges {
            let Some(a) = child_of(from) else { continue };
            for to in tos {
                if let Some(b) = child_of(to)
                    && a != b
                {
                    level.entry(a.clone()).or_default().insert(b);
                }
            }
        }
        for (from, tos) in &level {
            for to in tos {
                if reaches(&level, to, from) {
                    cycles.push(format!(
                        "{} -> {} -> ... -> {}",
                        from.join("::"),
                        to.join("::"),
                        from.join("::")
                    ));
                }
            }
        }
    }
    cycles
}

fn reaches(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>, from: &ModPath, to: &ModPath) -> bool {
    reachable(edges, from).contains(to)
}

fn reachable(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>, from: &ModPath) -> BTreeSet<ModPath> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from.clone()];
    while let Some(at) = todo.pop() {
        for next in edges.get(&at).into_iter().flatten() {
            if seen.insert(next.clone()) {
                todo.push(next.clone());
            }
        }
    }
    seen
}

fn p(text: &str) -> ModPath {
    text.split("::").map(String::from).collect()
}

#[test]
fn no_module_cycles_at_any_depth() {
    let cycles = sibling_cycles(&graph());
    assert!(cycles.is_empty(), "module cycles:\n{}", cycles.join("\n"));
}

/// The checker itself finds a cycle two levels down, and one through a
/// grouped import and an expression path.
#[test]
fn the_cycle_check_sees_nested_cycles() {
    let mut edges: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    edges.entry(p("a::b::c")).or_default().insert(p("a::b::d"));
    edges
        .entry(p("a::b::d"))
        .or_default()
        .insert(p("a::b::c::e"));
    edges.entry(p("a::b::c::e")).or_default();
    edges.entry(p("a::x")).or_default().insert(p("a::b"));
    let cycles = sibling_cycles(&edges);
    assert_eq!(cycles.len(), 2, "{cycles:?}");
    assert!(cycles[0].starts_with("a::b::c -> a::b::d"), "{cycles:?}");
    // A child naming its parent, or the parent its child, is no cycle.
    let mut edges: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    edges.entry(p("a")).or_default().insert(p("a::b"));
    edges.entry(p("a::b")).or_default().insert(p("a"));
    assert!(sibling_cycles(&edges).is_empty());
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
        let from: Vec<ModPath> = edges
            .keys()
            .filter(|m| m.first().is_some_and(|f| f == low))
            .cloned()
            .collect();
        for m in from {
            for reached in reachable(&edges, &m) {
                if above.contains(&reached[0].as_str()) {
                    wrong.push(format!("{} reaches {}", m.join("::"), reached.join("::")));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The reader itself: grouped imports at any depth, expression paths,
/// `super::` and `self::`, strings and comments.
#[test]
fn the_reader_sees_grouped_imports_and_skips_strings_and_comments() {
    let text = "use crate::{a::X, b, c::{D, e::F}};\n\
                let s = \"// crate::in_string\"; crate::after_string::f();\n\
                let r = r#\"crate::in_raw\"#; x(super::{p, q::R}); super::super::up::g();\n\
                // crate::in_comment\n\
                /* crate::in_block */ fn f<'a>(x: &'a str) -> char { crate::g::h(); self::k::l(); '\"' }\n";
    let module = p("m::n");
    let found: BTreeSet<String> = named_paths(&code_only(text), &module)
        .into_iter()
        .map(|path| path.join("::"))
        .collect();
    let want: BTreeSet<String> = [
        "a::X",
        "b",
        "c::D",
        "c::e::F",
        "after_string::f",
        "m::p",
        "m::q::R",
        "up::g",
        "g::h",
        "m::n::k::l",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(found, want);
}

/// Modules that are the inspection code: `holder`/`check`, their output,
/// and each backend's own inspection.
fn is_inspection(m: &ModPath) -> bool {
    matches!(m[0].as_str(), "inspect" | "report" | "registry")
        || m.iter().any(|part| part == "inspect")
}

#[test]
fn the_run_path_never_reaches_the_inspection_code() {
    let edges = graph();
    let mut wrong = Vec::new();
    for m in edges
        .keys()
        .filter(|m| m.first().is_some_and(|f| f == "run"))
    {
        for reached in reachable(&edges, m) {
            if is_inspection(&reached) {
                wrong.push(format!("{} reaches {}", m.join("::"), reached.join("::")));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
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

/// The file path (the run flow and the file backend) never runs a line of
/// a lock URL backend: nothing under `run` or `backend::file` reaches any
/// other folder of `backend` but `lost`, whichever backends there are.
#[test]
fn the_file_path_never_reaches_a_lock_url_backend() {
    let edges = graph();
    let url_backend = |m: &ModPath| {
        m.len() >= 2 && m[0] == "backend" && !matches!(m[1].as_str(), "file" | "lost")
    };
    let mut wrong = Vec::new();
    for m in edges
        .keys()
        .filter(|m| m.first().is_some_and(|f| f == "run") || m.starts_with(&p("backend::file")))
    {
        for reached in reachable(&edges, m) {
            if url_backend(&reached) {
                wrong.push(format!("{} reaches {}", m.join("::"), reached.join("::")));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
