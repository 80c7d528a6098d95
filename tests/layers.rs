//! Guards the layering DESIGN.md states ("Layers"): the arrows point down.
//! Reads the source of `src/` and fails on a module that names one of a
//! higher layer (`crate::<module>` outside comments), and on a circle of
//! imports among the files of one directory.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The layers, lowest first; modules of one layer may use one another
/// (the runtime item model and its persistent form convert both ways).
/// Keep this table and DESIGN.md's the same.
const LAYERS: &[&[&str]] = &[
    &["chain", "id"],
    &["error"],
    &["format", "json"],
    &["mmap"],
    &["fs"],
    &["item", "schema"],
    &["segment", "payload"],
    &["log"],
    &["catalog", "export", "state"],
    &["store"],
    &["async_store", "history", "archive"],
];

/// Directories whose files must not import in a circle.
const ACYCLIC_DIRS: &[&str] = &[
    "log", "archive", "segment", "schema", "item", "history", "store", "catalog", "format",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without its comments (doc comments link to modules
/// of every layer, which is no import).
fn code(path: &Path) -> String {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules `code` names as `crate::<name>`.
fn named_modules(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect();
        if !name.is_empty() {
            out.insert(name);
        }
    }
    out
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

#[test]
fn no_module_uses_one_of_a_higher_layer() {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut upward = Vec::new();
    for path in &files {
        let rel = path.strip_prefix(&root).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        if module == "lib" {
            continue;
        }
        let mine = layer_of(&module)
            .unwrap_or_else(|| panic!("module {module} is in no layer: add it to LAYERS"));
        for used in named_modules(&code(path)) {
            let Some(theirs) = layer_of(&used) else {
                continue;
            };
            if theirs > mine {
                upward.push(format!("{} uses crate::{used}", rel.display()));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports that point up:\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_files_of_a_directory_import_in_no_circle() {
    for dir in ACYCLIC_DIRS {
        let path = src().join(dir);
        let mut files = Vec::new();
        rust_files(&path, &mut files);
        let names: BTreeSet<String> = files
            .iter()
            .filter(|f| f.parent() == Some(path.as_path()))
            .map(|f| f.file_stem().unwrap().to_string_lossy().into_owned())
            .filter(|n| n != "mod" && n != "tests")
            .collect();
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for f in files.iter().filter(|f| f.parent() == Some(path.as_path())) {
            let me = f.file_stem().unwrap().to_string_lossy().into_owned();
            let code = code(f);
            for other in names.iter().filter(|n| **n != me) {
                let named = [
                    format!("super::{other}::"),
                    format!("crate::{dir}::{other}::"),
                ]
                .iter()
                .any(|p| code.contains(p.as_str()));
                if named {
                    edges.entry(me.clone()).or_default().insert(other.clone());
                }
            }
        }
        // A circle: a file that reaches itself.
        for start in edges.keys() {
            let mut seen = BTreeSet::new();
            let mut stack: Vec<&String> = edges[start].iter().collect();
            while let Some(next) = stack.pop() {
                assert!(
                    next != start,
                    "{dir}/: {start}.rs imports itself through {seen:?}"
                );
                if seen.insert(next.clone()) {
                    stack.extend(edges.get(next).into_iter().flatten());
                }
            }
        }
    }
}
