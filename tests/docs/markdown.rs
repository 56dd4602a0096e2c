//! What a Markdown document offers to links (its anchors) and what it links
//! to, read by pulldown-cmark, so that code spans and blocks are not
//! mistaken for links.

use std::collections::{BTreeSet, HashMap};

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};

/// A Markdown document's anchors and links.
pub struct Document {
    /// The anchors GitHub makes of its headings, and the `id`s of its HTML.
    pub anchors: BTreeSet<String>,
    /// Its headings' text, as written.
    pub headings: Vec<String>,
    /// Every link and image target, with its line.
    pub links: Vec<(usize, String)>,
    /// Every fenced code block: its language, and its text.
    pub code: Vec<(String, String)>,
}

impl Document {
    /// Reads `text`.
    pub fn parse(text: &str) -> Document {
        let mut document =
            Document { anchors: BTreeSet::new(), headings: Vec::new(), links: Vec::new(), code: Vec::new() };
        let mut code: Option<(String, String)> = None;
        let mut heading: Option<String> = None;
        let mut slugs: HashMap<String, usize> = HashMap::new();
        for (event, range) in Parser::new(text).into_offset_iter() {
            let line = text[..range.start].matches('\n').count() + 1;
            match event {
                Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
                Event::End(TagEnd::Heading(_)) => {
                    let text = heading.take().unwrap_or_default();
                    // GitHub numbers a repeated heading's anchor: `x`, `x-1`, `x-2`.
                    let slug = slug(&text);
                    let seen = slugs.entry(slug.clone()).or_insert(0);
                    document.anchors.insert(match *seen {
                        0 => slug,
                        n => format!("{slug}-{n}"),
                    });
                    *seen += 1;
                    document.headings.push(text);
                }
                Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(language))) => {
                    code = Some((language.to_string(), String::new()));
                }
                Event::End(TagEnd::CodeBlock) => document.code.extend(code.take()),
                Event::Text(text) | Event::Code(text) => {
                    if let Some(heading) = &mut heading {
                        heading.push_str(&text);
                    }
                    if let Some((_, code)) = &mut code {
                        code.push_str(&text);
                    }
                }
                Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                    document.links.push((line, dest_url.to_string()));
                }
                Event::Html(html) | Event::InlineHtml(html) => {
                    document.anchors.extend(attributes(&html, "id"));
                    document.links.extend(attributes(&html, "href").into_iter().map(|href| (line, href)));
                }
                _ => {}
            }
        }
        document
    }
}

/// GitHub's anchor of a heading: lower case, spaces to hyphens, punctuation
/// other than `-` and `_` dropped.
pub fn slug(heading: &str) -> String {
    (heading.trim().to_lowercase().chars())
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The values of `name="..."` in a piece of HTML.
fn attributes(html: &str, name: &str) -> Vec<String> {
    let pattern = format!(" {name}=\"");
    (html.match_indices(&pattern).map(|(at, _)| at + pattern.len()))
        .filter_map(|start| html[start..].find('"').map(|end| html[start..start + end].to_string()))
        .collect()
}

#[test]
fn slugs_are_github_s() {
    assert_eq!(slug("Forward events to your app"), "forward-events-to-your-app");
    assert_eq!(slug("Metrics, retention, logs and shutdown"), "metrics-retention-logs-and-shutdown");
    assert_eq!(slug("Behind Patroni and HAProxy"), "behind-patroni-and-haproxy");
    assert_eq!(slug("`webhook-inbox --help`"), "webhook-inbox---help");
    let document = Document::parse(
        "# A\n\n## A\n\n<a id=\"here\"></a>**Here.**\n\n`[no](link)` [yes](b.md#c)\n\n```toml\na = 1\n```\n",
    );
    assert_eq!(document.anchors, BTreeSet::from(["a".to_string(), "a-1".into(), "here".into()]));
    assert_eq!(document.links, [(7, "b.md#c".to_string())]);
    assert_eq!(document.code, [("toml".to_string(), "a = 1\n".to_string())]);
}
