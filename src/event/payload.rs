//! A delivery's body, checked once.

use bytes::Bytes;

use super::{EventError, json};

/// The body of a delivery, byte for byte as the provider sent it, known to
/// be UTF-8 text in which no JSON object repeats a key. Built once, right
/// after the signature check; everything after it (the provider's reader,
/// the archive, an effect) reads the same checked text.
///
/// Whether it is JSON at all is the provider's reader's to say (400), and
/// whether PostgreSQL can store it as `jsonb` the archive's (also 400).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload(String);

impl Payload {
    /// Checks a request's body: UTF-8 (else it is not JSON), no repeated key.
    pub fn from_body(body: Bytes) -> Result<Payload, EventError> {
        let text = String::from_utf8(Vec::from(body)).map_err(|_| EventError::NotJson)?;
        Payload::try_from(text)
    }

    /// The payload as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Payload {
    type Error = EventError;

    /// Checks text that is already UTF-8 (a stored payload, a test's body).
    fn try_from(text: String) -> Result<Payload, EventError> {
        json::check_unique_keys(&text)?;
        Ok(Payload(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_checked_once_for_utf8_and_repeated_keys() {
        let body = r#"{"a":1,"b":{"a":2}}"#;
        assert_eq!(Payload::from_body(Bytes::from(body)).unwrap().as_str(), body);
        assert_eq!(Payload::from_body(Bytes::from_static(b"{\"a\":\"\xff\"}")), Err(EventError::NotJson));
        assert_eq!(Payload::from_body(Bytes::from(r#"{"a":1,"a":2}"#)), Err(EventError::DuplicateKey));
    }
}
