//! A condition on what an archived event says: `data.customer_id=ctm_01…`.
//! Support's first question names an id inside the payload (a customer, a
//! subscription), not the provider's event id; this finds its events.

use std::fmt;
use std::str::FromStr;

/// Most bytes of one condition, path and value together: far above any
/// provider's key path and id, small enough to keep a query string short.
const MAX_LENGTH: usize = 1024;
/// Most keys in a path: the providers' bodies nest a few levels deep.
const MAX_DEPTH: usize = 16;

/// `PATH=VALUE`: the payload's value at `PATH` (object keys, or array
/// indices, separated by dots) read as text equals `VALUE`. A string reads
/// as itself, a number or a boolean as JSON writes it (`42`, `true`); a
/// missing key, an object or `null` never matches a value that is not the
/// same text.
///
/// Why control characters are refused: a NUL cannot be bound as PostgreSQL
/// text (the query would fail), and no provider puts them in ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadMatch {
    path: Vec<String>,
    value: String,
}

impl PayloadMatch {
    /// The keys, outermost first: what PostgreSQL's `#>>` takes.
    pub fn path(&self) -> &[String] {
        &self.path
    }

    /// The text the value must read as.
    pub fn value(&self) -> &str {
        &self.value
    }
}

/// Why a condition was refused; the text says how to write one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidPayloadMatch {
    /// No `=` between a path and a value.
    #[error("a payload condition is PATH=VALUE, e.g. data.customer_id=ctm_01")]
    NoValue,
    /// A path with an empty key (`data..id`, `.id`, `=x`).
    #[error("a payload path is keys separated by dots, none empty, e.g. data.customer_id")]
    EmptyKey,
    /// Too many keys.
    #[error("a payload path has at most {MAX_DEPTH} keys")]
    TooDeep,
    /// Too long.
    #[error("a payload condition is at most {MAX_LENGTH} bytes")]
    TooLong,
    /// A control character somewhere.
    #[error("a payload condition must not contain control characters")]
    ControlCharacter,
}

impl FromStr for PayloadMatch {
    type Err = InvalidPayloadMatch;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.len() > MAX_LENGTH {
            return Err(InvalidPayloadMatch::TooLong);
        }
        if text.chars().any(char::is_control) {
            return Err(InvalidPayloadMatch::ControlCharacter);
        }
        let (path, value) = text.split_once('=').ok_or(InvalidPayloadMatch::NoValue)?;
        let path: Vec<String> = path.split('.').map(str::to_owned).collect();
        if path.iter().any(String::is_empty) {
            return Err(InvalidPayloadMatch::EmptyKey);
        }
        if path.len() > MAX_DEPTH {
            return Err(InvalidPayloadMatch::TooDeep);
        }
        Ok(PayloadMatch { path, value: value.to_string() })
    }
}

impl fmt::Display for PayloadMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.path.join("."), self.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_is_a_dotted_path_and_the_rest_as_the_value() {
        let condition: PayloadMatch = "data.items.0.price.id=pri_01=x".parse().unwrap();
        assert_eq!(condition.path(), ["data", "items", "0", "price", "id"]);
        assert_eq!(condition.value(), "pri_01=x");
        assert_eq!(condition.to_string(), "data.items.0.price.id=pri_01=x");
        assert_eq!("data.note=".parse::<PayloadMatch>().unwrap().value(), "");
    }

    #[test]
    fn malformed_conditions_say_how_to_write_one() {
        let refused = |text: &str| text.parse::<PayloadMatch>().unwrap_err();
        assert_eq!(refused("data.customer_id"), InvalidPayloadMatch::NoValue);
        assert_eq!(refused("=ctm"), InvalidPayloadMatch::EmptyKey);
        assert_eq!(refused("data..id=ctm"), InvalidPayloadMatch::EmptyKey);
        assert_eq!(refused("data.id.=ctm"), InvalidPayloadMatch::EmptyKey);
        assert_eq!(refused(&format!("{}=x", vec!["k"; 17].join("."))), InvalidPayloadMatch::TooDeep);
        assert_eq!(refused(&format!("data.id={}", "x".repeat(1020))), InvalidPayloadMatch::TooLong);
        assert_eq!(refused("data.id=ctm\0"), InvalidPayloadMatch::ControlCharacter);
        assert_eq!(refused("data.i\u{1b}d=ctm"), InvalidPayloadMatch::ControlCharacter);
    }
}
