//! One body, one meaning: a signed body whose objects repeat a key is refused.
//!
//! Why: JSON leaves duplicate keys undefined, and the readers of a body
//! disagree on them. serde's structs refuse a repeated field they know,
//! skip the ones they do not, and `serde_json::Value` keeps the last;
//! PostgreSQL's `jsonb` keeps the last. A body with a repeated key could
//! then be applied under one reading while the archive (and an operator's
//! query, or a reprocessing) holds another. No provider sends such a body:
//! they serialize maps. So it is answered 400 before anything is stored.

use std::borrow::Cow;

use crate::event::EventError;

/// Fails if any object in `body` has the same key twice, compared after
/// unescaping as PostgreSQL does (`"a"` and `"\u0061"` are one key).
///
/// Runs before the body is parsed, so that a repeated field is reported as
/// such, not as whatever serde makes of it. On a body that is not JSON it may
/// or may not find a repeated key; either way the body is refused with 400,
/// by this check or by the parse. Never panics; iterative, so nesting depth
/// costs heap, not stack.
pub fn check_unique_keys(body: &str) -> Result<(), EventError> {
    let bytes = body.as_bytes();
    // The keys of every open object, innermost last; and one entry per open
    // container: where its keys start for an object, `None` for an array.
    // An object's keys are sorted and compared when it closes: no hashing,
    // and O(n log n) however many keys a hostile body puts in one object.
    let mut keys: Vec<Cow<'_, str>> = Vec::new();
    let mut open: Vec<Option<usize>> = Vec::new();
    let mut i = 0;
    // Why the jumps: this runs on every delivery's whole body before
    // anything else reads it, and a body is mostly strings and the bytes
    // between its brackets, which tell nothing here.
    while let Some(at) = bytes[i..].iter().position(|b| STRUCTURAL[usize::from(*b)]) {
        i += at;
        match bytes[i] {
            b'{' => open.push(Some(keys.len())),
            b'[' => open.push(None),
            b'}' | b']' => {
                if let Some(Some(start)) = open.pop() {
                    if repeats(&mut keys[start..]) {
                        return Err(EventError::DuplicateKey);
                    }
                    keys.truncate(start);
                }
            }
            _ => {
                let (end, escaped) = string_end(bytes, i);
                let is_key = bytes[end..].iter().find(|b| !b.is_ascii_whitespace()) == Some(&b':');
                if is_key && matches!(open.last(), Some(Some(_))) {
                    let token = &body[i..end];
                    keys.push(match escaped {
                        false => Cow::Borrowed(token.get(1..token.len() - 1).unwrap_or(token)),
                        true => unescape(token),
                    });
                }
                i = end;
                continue;
            }
        }
        i += 1;
    }
    Ok(())
}

/// The bytes [`check_unique_keys`] stops at: brackets and quotes.
const STRUCTURAL: [bool; 256] = {
    let mut table = [false; 256];
    table[b'{' as usize] = true;
    table[b'}' as usize] = true;
    table[b'[' as usize] = true;
    table[b']' as usize] = true;
    table[b'"' as usize] = true;
    table
};

/// Whether an object's keys hold one twice. A few keys (most objects) are
/// compared pairwise, where unequal lengths settle most pairs at once; more
/// are sorted first, so that a hostile object costs O(n log n).
fn repeats(object: &mut [Cow<'_, str>]) -> bool {
    if object.len() <= 8 {
        return (1..object.len()).any(|j| object[..j].contains(&object[j]));
    }
    object.sort_unstable();
    object.windows(2).any(|pair| pair[0] == pair[1])
}

/// Index just past the string starting with the quote at `start` (or the
/// end of the input, for an unterminated one), and whether it has an escape.
fn string_end(bytes: &[u8], start: usize) -> (usize, bool) {
    let mut i = start + 1;
    let mut escaped = false;
    while let Some(at) = bytes.get(i..).and_then(|rest| memchr::memchr2(b'"', b'\\', rest)) {
        i += at;
        match bytes[i] {
            b'"' => return (i + 1, escaped),
            _ => (i, escaped) = (i + 2, true),
        }
    }
    (bytes.len(), escaped)
}

/// The key an escaped string token stands for; the token itself if it does
/// not decode (such a body fails later anyway).
fn unescape(token: &str) -> Cow<'_, str> {
    serde_json::from_str::<String>(token).map_or(Cow::Borrowed(token), Cow::Owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_keys_are_found_at_any_depth_and_after_unescaping() {
        for body in [
            r#"{"event_id":"a","event_id":"b"}"#,
            r#"{"data":{"x":1,"y":[{"z":1,"z":2}]}}"#,
            r#"{"a":1,"\u0061":2}"#,
            r#"{"a" : 1, "b": {"a": 2}, "a" :3}"#,
        ] {
            assert_eq!(check_unique_keys(body), Err(EventError::DuplicateKey), "{body}");
        }
    }

    #[test]
    fn the_same_key_in_different_objects_and_key_like_values_are_fine() {
        for body in [
            r#"{"a":{"a":{"a":1}},"b":[{"a":1},{"a":2}]}"#,
            r#"{"a":"a","b":"a","c":["a","a"]}"#,
            r#"{"a\"b":1,"a\\":2,"k":"x\":"}"#,
            r#"[["a"],{"a":1}]"#,
            "",
            r#"{"unterminated"#,
            r#"}}]]{"a":1}"#,
        ] {
            assert_eq!(check_unique_keys(body), Ok(()), "{body}");
        }
    }

    #[test]
    fn objects_of_many_keys_are_checked_as_well_as_small_ones() {
        let keys: Vec<String> = (0..20).map(|i| format!("\"k{i}\":{i}")).collect();
        assert_eq!(check_unique_keys(&format!("{{{}}}", keys.join(","))), Ok(()));
        for at in [0, 9, 19] {
            let mut repeated = keys.clone();
            repeated.push(format!("\"k{at}\":0"));
            let body = format!("{{{}}}", repeated.join(","));
            assert_eq!(check_unique_keys(&body), Err(EventError::DuplicateKey), "{body}");
        }
    }

    #[test]
    fn deep_nesting_costs_no_stack() {
        let depth = 200_000;
        let body = format!("{}{}", r#"{"a":"#.repeat(depth), "}".repeat(depth)).replace(":}", ":1}");
        assert_eq!(check_unique_keys(&body), Ok(()));
    }
}
