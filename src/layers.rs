//! The modules' dependencies have no circle: for any two top-level modules,
//! at most one names the other, even through a third. A circle (`config`
//! and `db` once) means neither can be read, changed or tested without the
//! other; the core (`inbox`, `queue`) names no layer built on it. And
//! `config` is a leaf: it parses flags into plain values and names no other
//! module, so that what it reads never depends on what the service builds
//! from it (the entry point, `cli`, does that).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `src/`, by its path from there, with its text.
fn sources(src: &Path) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    let mut pending = vec![src.to_path_buf()];
    while let Some(path) = pending.pop() {
        if path.is_dir() {
            pending.extend(std::fs::read_dir(&path).unwrap().map(|entry| entry.unwrap().path()));
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            files.push((path.strip_prefix(src).unwrap().to_path_buf(), text));
        }
    }
    files
}

/// The names `text` gives after each `prefix` (`crate::`, `super::`), but
/// `own`.
fn named_after(text: &str, prefix: &str, own: &str) -> BTreeSet<String> {
    text.match_indices(prefix)
        .map(|(at, _)| {
            text[at + prefix.len()..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
        })
        .filter(|name: &String| !name.is_empty() && name != own)
        .collect()
}

/// Every top-level module (a file or folder under `src/`) and the other
/// top-level modules its files name as `crate::<module>`.
fn dependencies(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, text) in sources(src) {
        let first = path.components().next().unwrap().as_os_str().to_str().unwrap();
        let module = first.trim_end_matches(".rs").to_string();
        if module == "lib" || module == "main" {
            continue;
        }
        let named = named_after(&text, "crate::", &module);
        graph.entry(module).or_default().extend(named);
    }
    graph
}

/// For every folder under `src/`, its files (but `mod.rs`, which names them
/// all) and the sibling files each names as `super::<file>`.
fn sibling_dependencies(src: &Path) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut folders: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (path, text) in sources(src) {
        let module = path.file_stem().unwrap().to_str().unwrap().to_string();
        if ["mod", "lib", "main"].contains(&module.as_str()) {
            continue;
        }
        let folder = path.parent().unwrap().display().to_string();
        let named = named_after(&text, "super::", &module);
        folders.entry(folder).or_default().entry(module).or_default().extend(named);
    }
    folders
}

/// A circle through `graph`, as the modules along it, if there is one.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        module: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|on_path| on_path == module) {
            let mut found = path[start..].to_vec();
            found.push(module.to_string());
            return Some(found);
        }
        if done.contains(module) {
            return None;
        }
        path.push(module.to_string());
        for next in graph.get(module).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(module.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|module| visit(module, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_module_depends_on_itself_through_others() {
    let graph = dependencies(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(graph.len() > 10 && graph["cli"].contains("inbox"), "the scan found the modules: {graph:?}");
    assert_eq!(circle(&graph), None, "an import circle");
}

#[test]
fn no_file_depends_on_itself_through_its_siblings() {
    let folders = sibling_dependencies(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(folders["http/console"]["error"].contains("templates"), "the scan found the files: {folders:?}");
    for (folder, graph) in &folders {
        assert_eq!(circle(graph), None, "an import circle in src/{folder}");
    }
}

#[test]
fn configuration_names_no_other_module() {
    let graph = dependencies(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(graph["telemetry"].contains("config"), "the scan found who names config: {graph:?}");
    assert_eq!(graph["config"], BTreeSet::new(), "config names other modules");
}

#[test]
fn a_circle_is_found_however_long() {
    let graph = |edges: &[(&str, &str)]| {
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, to) in edges {
            graph.entry(from.to_string()).or_default().insert(to.to_string());
        }
        graph
    };
    assert_eq!(circle(&graph(&[("a", "b"), ("b", "c")])), None);
    assert_eq!(circle(&graph(&[("a", "b"), ("b", "c"), ("c", "a")])).map(|c| c.len()), Some(4));
}
