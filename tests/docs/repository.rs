//! The repository's text files, its Markdown documents parsed, and the
//! references to documents that other files hold.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use crate::markdown::Document;

/// Every text file under the repository's root (not `target/`, nor hidden
/// folders but `.ci`), by path from the root.
pub struct Repository {
    root: PathBuf,
    pub texts: BTreeMap<PathBuf, String>,
    pub documents: BTreeMap<PathBuf, Document>,
}

impl Repository {
    /// Reads the repository this test was built from.
    pub fn read() -> Repository {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let mut texts = BTreeMap::new();
        let mut pending = vec![PathBuf::new()];
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir(root.join(&dir)).unwrap() {
                let entry = entry.unwrap();
                let name = entry.file_name().to_string_lossy().into_owned();
                let path = dir.join(&name);
                if entry.file_type().unwrap().is_dir() {
                    let hidden = name.starts_with('.') && name != ".ci";
                    if !hidden && !matches!(name.as_str(), "target" | "corpus" | "artifacts") {
                        pending.push(path);
                    }
                } else if let Ok(text) = std::fs::read_to_string(root.join(&path)) {
                    texts.insert(path, text);
                }
            }
        }
        let documents = (texts.iter())
            .filter(|(path, _)| path.extension().is_some_and(|ext| ext == "md"))
            .map(|(path, text)| (path.clone(), Document::parse(text)))
            .collect();
        Repository { root, texts, documents }
    }

    /// The texts but this test's own, whose examples are no references.
    pub fn others(&self) -> impl Iterator<Item = (&PathBuf, &String)> {
        self.texts.iter().filter(|(path, _)| !path.starts_with("tests/docs"))
    }

    /// Whether `target`, a link in `from` (a path from the root), leads to a
    /// file of the repository and, if it names one, to an anchor of it.
    /// Links to other sites pass unchecked.
    pub fn resolve(&self, from: &Path, target: &str) -> Result<(), String> {
        if target.contains("://") || target.starts_with("mailto:") {
            return Ok(());
        }
        let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
        let path = match path {
            "" => from.to_path_buf(),
            path => normalize(&from.parent().unwrap_or(Path::new("")).join(path))?,
        };
        if !self.root.join(&path).exists() {
            return Err(format!("no file {}", path.display()));
        }
        if anchor.is_empty() {
            return Ok(());
        }
        match self.documents.get(&path) {
            Some(document) if document.anchors.contains(anchor) => Ok(()),
            Some(_) => Err(format!("{} has no anchor {anchor}", path.display())),
            None => Err(format!("{} is no Markdown document to hold #{anchor}", path.display())),
        }
    }
}

/// `a/../b/./c` as `b/c`; an error past the root.
fn normalize(path: &Path) -> Result<PathBuf, String> {
    let mut normal = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir if !normal.pop() => return Err("a path above the repository".into()),
            Component::ParentDir | Component::CurDir => {}
            component => normal.push(component),
        }
    }
    Ok(normal)
}

/// The paths of Markdown files a text names, from the root (`DESIGN.md`,
/// `docs/forwarding.md#retries`), with their lines. Absolute paths (other
/// machines' files) are left out.
pub fn document_paths(text: &str) -> Vec<(usize, String)> {
    let path_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-');
    let anchor_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-');
    let mut found = Vec::new();
    for (at, _) in text.match_indices(".md") {
        let end = at + ".md".len();
        if text[end..].starts_with(|c: char| c.is_ascii_alphanumeric()) {
            continue;
        }
        let start = text[..at].rfind(|c| !path_char(c)).map_or(0, |before| before + 1);
        let path = &text[start..end];
        if path == ".md" || path.starts_with('/') {
            continue;
        }
        let anchor = match text[end..].strip_prefix('#') {
            Some(rest) => &rest[..rest.find(|c| !anchor_char(c)).unwrap_or(rest.len())],
            None => "",
        };
        let target = match anchor {
            "" => path.to_string(),
            anchor => format!("{path}#{anchor}"),
        };
        found.push((line_of(text, at), target));
    }
    found
}

/// The README sections a text names in words, with their lines: `README
/// "Missed events"`, `README, "Forward events to your app"`, `the README's
/// "Behind a proxy"`, also across a comment's lines and in a Rust string.
pub fn readme_sections(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices("README") {
        let rest = &text[at + "README".len()..];
        let window = joined(&rest[..rest.char_indices().nth(160).map_or(rest.len(), |(end, _)| end)]);
        let window = window.strip_prefix("'s").unwrap_or(&window);
        let window = window.strip_prefix([',', ':']).unwrap_or(window).trim_start();
        let Some(quoted) = window.strip_prefix('"') else { continue };
        let section = &quoted[..quoted.find('"').unwrap_or(0)];
        if section.starts_with(char::is_alphabetic) {
            found.push((line_of(text, at), section.to_string()));
        }
    }
    found
}

/// `text` with comment lines joined (`//!`, `///`, `//`, `--`, `#` at a
/// line's start) and Rust's `\"` as `"`.
fn joined(text: &str) -> String {
    let mut joined = String::new();
    for (index, line) in text.split('\n').enumerate() {
        let line = match index {
            0 => line,
            _ => {
                let line = line.trim_start();
                let line =
                    ["//!", "///", "//", "--", "#"].iter().find_map(|marker| line.strip_prefix(marker));
                let Some(line) = line else { break };
                joined.push(' ');
                line.trim_start()
            }
        };
        joined.push_str(line);
    }
    joined.replace("\\\"", "\"")
}

fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

#[test]
fn finds_references_across_comment_lines_and_in_strings() {
    let code = "//! longer than a window (README \"Missed\n//! events\") loses nothing\n\
                let help = \"see the README, \\\"Forward events to your app\\\"\";\n\
                # See docs/forwarding.md#retries and bench/RESULTS.md, not /etc/x.md\n";
    assert_eq!(
        readme_sections(code),
        [(1, "Missed events".to_string()), (3, "Forward events to your app".to_string())]
    );
    assert_eq!(
        document_paths(code),
        [(4, "docs/forwarding.md#retries".to_string()), (4, "bench/RESULTS.md".to_string())]
    );
}
