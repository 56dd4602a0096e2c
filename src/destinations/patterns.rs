//! Which events go to a destination: `provider:type` patterns, where the
//! type may end in `*` (`paddle:subscription.*`, `clerk:*`,
//! `stripe:invoice.paid`).

use std::fmt;

/// One `provider:type` pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventPattern {
    provider: String,
    /// The type, or its prefix when `prefix` is set.
    event_type: String,
    prefix: bool,
}

/// Why a pattern does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not an event pattern like \"paddle:subscription.*\", \"clerk:*\" or \"stripe:invoice.paid\" \
     (a provider, a colon, an event type that may end in *)"
)]
pub struct InvalidPattern(pub String);

impl EventPattern {
    /// Parses `provider:type`, `provider:prefix*` or `provider:*`.
    pub fn parse(text: &str) -> Result<EventPattern, InvalidPattern> {
        let invalid = || InvalidPattern(text.to_string());
        let (provider, event_type) = text.split_once(':').ok_or_else(invalid)?;
        let valid_provider = !provider.is_empty()
            && provider
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        let (event_type, prefix) = match event_type.strip_suffix('*') {
            Some(stem) => (stem, true),
            None => (event_type, false),
        };
        let valid_type = (prefix || !event_type.is_empty())
            && !event_type.contains('*')
            && !event_type.chars().any(|c| c.is_control() || c.is_whitespace());
        if !(valid_provider && valid_type) {
            return Err(invalid());
        }
        Ok(EventPattern { provider: provider.to_string(), event_type: event_type.to_string(), prefix })
    }

    /// The provider it names.
    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// Whether an event of `event_type` from `provider` matches.
    pub fn matches(&self, provider: &str, event_type: &str) -> bool {
        provider == self.provider
            && match self.prefix {
                true => event_type.starts_with(&self.event_type),
                false => event_type == self.event_type,
            }
    }
}

impl fmt::Display for EventPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}{}", self.provider, self.event_type, if self.prefix { "*" } else { "" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_a_provider_and_an_exact_type_or_a_prefix() {
        let subscriptions = EventPattern::parse("paddle:subscription.*").unwrap();
        assert!(subscriptions.matches("paddle", "subscription.created"));
        assert!(!subscriptions.matches("paddle", "transaction.completed"));
        assert!(!subscriptions.matches("clerk", "subscription.created"));
        let everything = EventPattern::parse("clerk:*").unwrap();
        assert!(everything.matches("clerk", "user.created") && everything.matches("clerk", "x"));
        let exact = EventPattern::parse("stripe:invoice.paid").unwrap();
        assert!(exact.matches("stripe", "invoice.paid") && !exact.matches("stripe", "invoice.paid.x"));
        assert_eq!(exact.to_string(), "stripe:invoice.paid");
        assert_eq!(subscriptions.to_string(), "paddle:subscription.*");
    }

    #[test]
    fn malformed_patterns_are_refused() {
        for bad in
            ["paddle", ":x", "paddle:", "Paddle:x", "paddle:a*b", "paddle:**", "paddle:a b", "pad dle:*"]
        {
            assert_eq!(EventPattern::parse(bad), Err(InvalidPattern(bad.into())), "{bad}");
        }
    }
}
