//! Archived values shown to a person (the CLI's output, the console's
//! pages): every character that could not be seen, or that changes how the
//! text around it is shown, is written as an escape.
//!
//! Why escape rather than refuse at intake: providers sign what they send,
//! so such a character in an event id or type is the provider's own, and a
//! 400 would make it retry that event for days and then drop it. Stored as
//! sent, it is deduplicated on its exact bytes; shown, it must neither
//! drive the operator's terminal (`ESC [2J`, OSC 8 links) nor make one id
//! look like another (U+202E RIGHT-TO-LEFT OVERRIDE, U+200B ZERO WIDTH
//! SPACE).

use std::borrow::Cow;

use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

/// Whether `c` is shown as an escape: control characters (C0, DEL, C1),
/// format characters (bidirectional controls, zero-width characters, the
/// byte order mark), line and paragraph separators, spaces other than
/// U+0020 (which look like it), and code points Unicode has not assigned.
pub fn is_hidden(c: char) -> bool {
    match c.general_category() {
        GeneralCategory::Control
        | GeneralCategory::Format
        | GeneralCategory::LineSeparator
        | GeneralCategory::ParagraphSeparator
        | GeneralCategory::Surrogate
        | GeneralCategory::Unassigned => true,
        GeneralCategory::SpaceSeparator => c != ' ',
        _ => false,
    }
}

/// `text` with each [hidden](is_hidden) character escaped, `\n`, `\r`,
/// `\t` as such and the others as `\u{202e}`; borrowed when there is none.
pub fn visible(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_hidden) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => shown.push_str("\\n"),
            '\r' => shown.push_str("\\r"),
            '\t' => shown.push_str("\\t"),
            c if is_hidden(c) => shown.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => shown.push(c),
        }
    }
    Cow::Owned(shown)
}

/// JSON text (as serde_json writes it) with each [hidden](is_hidden)
/// character inside its strings written as a JSON `\uXXXX` escape: the
/// same JSON value, safe to print. serde_json escapes C0 controls itself,
/// and writes nothing but ASCII outside strings (the newlines and spaces of
/// pretty printing included), so only DEL and non-ASCII characters are
/// left to escape, wherever they are.
pub fn visible_json(json: &str) -> Cow<'_, str> {
    let escaped = |c: char| (c == '\u{7f}' || !c.is_ascii()) && is_hidden(c);
    if !json.chars().any(escaped) {
        return Cow::Borrowed(json);
    }
    let mut shown = String::with_capacity(json.len() + 8);
    for c in json.chars() {
        if escaped(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                shown.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            shown.push(c);
        }
    }
    Cow::Owned(shown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn hidden_characters_are_escaped_and_visible_ones_kept() {
        assert!(matches!(visible("evt_01 Ünïcödé 名前 ✓"), Cow::Borrowed(_)));
        for (text, shown) in [
            ("\u{1b}[2Jevt", "\\u{1b}[2Jevt"),
            ("a\nb\tc\r", "a\\nb\\tc\\r"),
            ("evt_\u{202e}10", "evt_\\u{202e}10"),
            ("evt\u{200b}_1", "evt\\u{200b}_1"),
            ("\u{feff}x\u{2028}\u{a0}\u{3000}", "\\u{feff}x\\u{2028}\\u{a0}\\u{3000}"),
            ("\u{7f}\u{9b}31m", "\\u{7f}\\u{9b}31m"),
            ("\u{e0041}tag", "\\u{e0041}tag"),
            ("\u{40000}", "\\u{40000}"),
        ] {
            assert_eq!(visible(text), shown, "{text:?}");
        }
    }

    #[test]
    fn escaped_json_is_the_same_value_and_prints_no_hidden_character() {
        let value = json!({ "id": "evt_\u{202e}1\u{200b}", "esc": "\u{1b}[2J\u{9b}\u{7f}", "k\u{2066}": ["\u{e0041}", "é"] });
        for text in [serde_json::to_string(&value).unwrap(), serde_json::to_string_pretty(&value).unwrap()] {
            let shown = visible_json(&text);
            assert!(!shown.chars().any(|c| is_hidden(c) && c != '\n'), "{shown}");
            assert!(
                shown.contains("\\u202e") && shown.contains("\\udb40\\udc41") && shown.contains('é'),
                "{shown}"
            );
            assert_eq!(serde_json::from_str::<Value>(&shown).unwrap(), value);
        }
    }
}
