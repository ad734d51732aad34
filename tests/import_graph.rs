//! No import circle within any crate: the modules each crate's files name through
//! `crate::…` (a name re-exported from the crate root counts as its module's) form a graph
//! without cycles. Cargo already forbids circles between crates.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// The identifiers in `text`.
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
}

/// Code without `//` comments.
fn code(text: &str) -> String {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The edges between the top-level modules of the crate whose sources are in `src`.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files = sources(src);
    let module = |p: &Path| -> String {
        let rel = p.strip_prefix(src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        first.trim_end_matches(".rs").to_string()
    };
    let modules: BTreeSet<String> = files.iter().map(|p| module(p)).collect();
    // Names the crate root re-exports (`pub use module::{A, B}`), by the module they are from.
    let root = code(&std::fs::read_to_string(src.join("lib.rs")).unwrap_or_default());
    let mut exported: BTreeMap<String, String> = BTreeMap::new();
    for stmt in root.split(';') {
        let Some(rest) = stmt.trim().strip_prefix("pub use ") else {
            continue;
        };
        let Some((from, names)) = rest.split_once("::") else {
            continue;
        };
        for name in words(names) {
            exported.insert(name.to_string(), from.trim().to_string());
        }
    }
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let from = module(file);
        if from == "lib" || from == "main" {
            continue;
        }
        let text = code(&std::fs::read_to_string(file).unwrap());
        for (i, _) in text.match_indices("crate::") {
            let after = &text[i + "crate::".len()..];
            let named: Vec<&str> = match after.strip_prefix('{') {
                Some(list) => words(list.split('}').next().unwrap_or("")).collect(),
                None => words(after).take(1).collect(),
            };
            for name in named {
                let to = match modules.contains(name) {
                    true => Some(name.to_string()),
                    false => exported.get(name).cloned(),
                };
                if let Some(to) = to.filter(|t| *t != from && modules.contains(t)) {
                    edges.entry(from.clone()).or_default().insert(to);
                }
            }
        }
    }
    edges
}

/// A cycle of `edges`, if there is one.
fn cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut found = path[i..].to_vec();
            found.push(n.to_string());
            return Some(found);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for next in edges.get(n).into_iter().flatten() {
            if let Some(c) = visit(next, edges, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|n| visit(n, edges, &mut Vec::new(), &mut done))
}

#[test]
fn no_crate_imports_in_a_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut dirs = vec![root.join("src")];
    for entry in std::fs::read_dir(root.join("crates")).unwrap().flatten() {
        dirs.push(entry.path().join("src"));
    }
    let mut checked = 0;
    for src in dirs.iter().filter(|d| d.is_dir()) {
        let edges = graph(src);
        checked += edges.len();
        if let Some(c) = cycle(&edges) {
            panic!("{}: {}", src.display(), c.join(" → "));
        }
    }
    assert!(
        checked > 20,
        "only {checked} modules with imports were found"
    );
}

#[test]
fn a_circle_is_found() {
    let edges: BTreeMap<String, BTreeSet<String>> = [("a", "b"), ("b", "c"), ("c", "a")]
        .into_iter()
        .map(|(f, t)| (f.to_string(), BTreeSet::from([t.to_string()])))
        .collect();
    assert_eq!(cycle(&edges).unwrap(), ["a", "b", "c", "a"]);
}
