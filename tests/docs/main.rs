//! The documents: every link and anchor in them resolves, and so does every
//! reference to a document or a README section from anywhere else in the
//! repository (code comments, `--help` texts, error messages, scripts), so
//! that moving a section cannot leave a pointer to nowhere. Offline: links
//! to other sites are not followed. Their destinations examples are files
//! `serve` accepts, and the README's install line names what CI installs
//! for the tests.

mod markdown;
mod repository;

use std::path::Path;

use repository::Repository;

#[test]
fn every_link_and_anchor_in_the_documents_resolves() {
    let repo = Repository::read();
    let mut broken = Vec::new();
    for (path, document) in &repo.documents {
        for (line, target) in &document.links {
            if let Err(why) = repo.resolve(path, target) {
                broken.push(format!("{}:{line}: {target}: {why}", path.display()));
            }
        }
    }
    assert!(repo.documents.len() >= 5, "{:?}", repo.documents.keys());
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_reference_to_a_document_from_code_scripts_and_settings_resolves() {
    let repo = Repository::read();
    let mut broken = Vec::new();
    let mut checked = 0;
    for (path, text) in repo.others() {
        if path.extension().is_some_and(|ext| ext == "md") {
            continue;
        }
        // Written from the repository's root: `docs/forwarding.md#retries`.
        for (line, target) in repository::document_paths(text) {
            checked += 1;
            if let Err(why) = repo.resolve(Path::new("from the root"), &target) {
                broken.push(format!("{}:{line}: {target}: {why}", path.display()));
            }
        }
    }
    assert!(checked >= 20, "only {checked} references found");
    assert!(broken.is_empty(), "references to nowhere:\n{}", broken.join("\n"));
}

#[test]
fn every_readme_section_named_in_words_is_a_heading_of_the_readme() {
    let repo = Repository::read();
    let readme = &repo.documents[Path::new("README.md")];
    let headings: Vec<String> = readme.headings.iter().map(|heading| words(heading)).collect();
    let mut broken = Vec::new();
    let mut checked = 0;
    for (path, text) in repo.others() {
        for (line, section) in repository::readme_sections(text) {
            checked += 1;
            if !headings.contains(&words(&section)) {
                broken.push(format!("{}:{line}: README \"{section}\"", path.display()));
            }
        }
    }
    assert!(checked >= 3, "only {checked} references found");
    assert!(broken.is_empty(), "README sections that are no heading of it:\n{}", broken.join("\n"));
}

#[test]
fn every_toml_example_in_the_documents_is_a_destinations_file_serve_accepts() {
    use webhook_inbox::destinations::Declaration;

    // A secret for each `${NAME}` the examples read from the environment.
    let secret = |_: &str| Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_string());
    let repo = Repository::read();
    let mut checked = 0;
    for (path, document) in &repo.documents {
        for (_, toml) in document.code.iter().filter(|(language, _)| language == "toml") {
            checked += 1;
            if let Err(error) = Declaration::parse(toml, &path.display().to_string(), secret) {
                panic!("{error}:\n{toml}");
            }
        }
    }
    assert!(checked >= 2, "only {checked} examples found");
}

#[test]
fn the_readme_s_install_line_names_every_package_ci_installs_for_the_tests() {
    let repo = Repository::read();
    let ci = &repo.texts[Path::new(".ci/run")];
    let packages = (ci.lines().find_map(|line| line.strip_prefix("test_packages=(")))
        .and_then(|rest| rest.strip_suffix(')'))
        .expect(".ci/run lists test_packages=(...)");
    let readme = &repo.texts[Path::new("README.md")];
    let install = readme.lines().find(|line| line.contains("apt install")).expect("an apt install line");
    let named: Vec<&str> = install.split_whitespace().collect();
    for package in packages.split_whitespace() {
        assert!(named.contains(&package), "the README's install line lacks {package}: {install}");
    }
}

/// Lower case, one space between words: how a section is compared.
fn words(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}
