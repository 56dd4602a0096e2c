//! The modules' dependencies have no circle: for any two top-level modules,
//! at most one names the other, even through a third. A circle (`config`
//! and `db` once) means neither can be read, changed or tested without the
//! other; the core (`inbox`, `queue`) names no layer built on it. And
//! `config` is a leaf: it parses flags into plain values and names no other
//! module, so that what it reads never depends on what the service builds
//! from it (the entry point, `cli`, does that).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every top-level module (a file or folder under `src/`) and the other
/// top-level modules its files name as `crate::<module>`.
fn dependencies(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut pending = vec![src.to_path_buf()];
    while let Some(path) = pending.pop() {
        if path.is_dir() {
            pending.extend(std::fs::read_dir(&path).unwrap().map(|entry| entry.unwrap().path()));
            continue;
        }
        if path.extension().is_none_or(|extension| extension != "rs") {
            continue;
        }
        let relative = path.strip_prefix(src).unwrap();
        let first = relative.components().next().unwrap().as_os_str().to_str().unwrap();
        let module = first.trim_end_matches(".rs").to_string();
        if module == "lib" || module == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let named = graph.entry(module.clone()).or_default();
        for (at, _) in text.match_indices("crate::") {
            let rest = &text[at + "crate::".len()..];
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !name.is_empty() && name != module {
                named.insert(name);
            }
        }
    }
    graph
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

/// For every folder under `src/`, its files (but `mod.rs`, which names them
/// all) and the sibling files each names as `super::<file>`.
fn sibling_dependencies(src: &Path) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut folders = BTreeMap::new();
    let mut pending = vec![src.to_path_buf()];
    while let Some(folder) = pending.pop() {
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            let Some(module) = path.file_name().unwrap().to_str().unwrap().strip_suffix(".rs") else {
                continue;
            };
            if ["mod", "lib", "main"].contains(&module) {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let named = graph.entry(module.to_string()).or_default();
            for (at, _) in text.match_indices("super::") {
                let rest = &text[at + "super::".len()..];
                let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() && name != module {
                    named.insert(name);
                }
            }
        }
        folders.insert(folder.strip_prefix(src).unwrap().display().to_string(), graph);
    }
    folders
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
