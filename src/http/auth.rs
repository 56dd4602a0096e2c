//! Bearer tokens for the operator endpoints (`/admin`, `/metrics`, and the console's sign-in).

use std::net::IpAddr;
use std::sync::Arc;

use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::AppState;
use super::error::ApiError;
use super::guessing::Refusal;
use tokio::time::Instant;

/// A configured token; only its SHA-256 digest is kept.
#[derive(Clone)]
pub struct BearerToken(Arc<[u8; 32]>);

impl BearerToken {
    /// Shortest token accepted, in bytes: anything shorter is guessable.
    pub const MIN_LEN: usize = 16;

    /// Keeps the digest of `token`; refuses one shorter than
    /// [`MIN_LEN`](Self::MIN_LEN) bytes, and one with surrounding
    /// whitespace, which [`check`](Self::check) trims from the presented
    /// token and so could never match.
    pub fn new(token: &SecretString) -> Result<Self, InvalidToken> {
        let token = token.expose_secret();
        if token.trim() != token {
            return Err(InvalidToken::SurroundingWhitespace);
        }
        if token.len() < Self::MIN_LEN {
            return Err(InvalidToken::TooShort);
        }
        Ok(BearerToken(Arc::new(Sha256::digest(token.as_bytes()).into())))
    }

    /// Checks `Authorization: Bearer <token>` of a request to `surface`
    /// (`admin`, `metrics`), slowed for an address that sent too many wrong
    /// ones ([`Guessing`]); a refusal is counted and logged with the
    /// client's address (never the token).
    pub fn check_guarded(
        &self,
        state: &AppState,
        surface: &'static str,
        request: &Parts,
    ) -> Result<(), ApiError> {
        // No token is no guess: not counted.
        let presented = presented(&request.headers).ok_or(ApiError::BadToken("missing bearer token"))?;
        let client = state.guessing.client(&request.headers, &request.extensions);
        state.guessing.check(client, Instant::now(), || self.matches(presented)).map_err(|refusal| {
            note_refusal(state, surface, client, refusal);
            match refusal {
                Refusal::Wrong => ApiError::BadToken("invalid bearer token"),
                Refusal::Throttled(wait) => ApiError::TooManyGuesses(wait),
            }
        })
    }

    /// Checks `Authorization: Bearer <token>`.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let presented = presented(headers).ok_or(ApiError::BadToken("missing bearer token"))?;
        match self.matches(presented) {
            true => Ok(()),
            false => Err(ApiError::BadToken("invalid bearer token")),
        }
    }

    /// Whether `presented` is the token (the console's sign-in form sends it).
    ///
    /// Why digests: comparing the digests in constant time reveals neither
    /// the token's bytes nor its length through timing.
    pub fn matches(&self, presented: &str) -> bool {
        let digest = Sha256::digest(presented.as_bytes());
        bool::from(digest.as_slice().ct_eq(self.0.as_slice()))
    }
}

/// The bearer token of `Authorization`, if the header holds one.
fn presented(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
}

/// Counts and logs an operator token of `surface` refused from `client`
/// (its address, never the token).
pub fn note_refusal(state: &AppState, surface: &'static str, client: Option<IpAddr>, refusal: Refusal) {
    let client = client.map_or_else(|| "unknown".to_string(), |ip| ip.to_string());
    match refusal {
        Refusal::Wrong => {
            state.metrics.token_refused(surface, "wrong");
            tracing::warn!(surface, client, "wrong operator token");
        }
        Refusal::Throttled(wait) => {
            state.metrics.token_refused(surface, "throttled");
            tracing::warn!(
                surface,
                client,
                wait_secs = wait.as_secs_f64(),
                "operator token refused: too many wrong ones from this address"
            );
        }
    }
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken([REDACTED])")
    }
}

/// A configured token that cannot be used; never shows the token.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidToken {
    /// Shorter than [`BearerToken::MIN_LEN`] bytes.
    #[error("a bearer token must be at least 16 bytes (e.g. `openssl rand -hex 32`)")]
    TooShort,
    /// Starts or ends with whitespace.
    #[error("a bearer token must not start or end with whitespace (it could never match)")]
    SurroundingWhitespace,
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(authorization: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static(authorization));
        headers
    }

    #[test]
    fn only_the_configured_token_passes() {
        let token = BearerToken::new(&SecretString::from("0123456789abcdef")).unwrap();
        assert!(token.check(&headers("Bearer 0123456789abcdef")).is_ok());
        assert!(token.check(&headers("bearer 0123456789abcdef")).is_ok());
        assert!(matches!(token.check(&headers("Bearer 0123456789abcdeF")), Err(ApiError::BadToken(_))));
        assert!(matches!(token.check(&headers("Basic 0123456789abcdef")), Err(ApiError::BadToken(_))));
        assert!(matches!(token.check(&HeaderMap::new()), Err(ApiError::BadToken(_))));
        assert_eq!(format!("{token:?}"), "BearerToken([REDACTED])");
    }

    #[test]
    fn a_short_token_or_one_with_surrounding_whitespace_is_refused() {
        let new = |token: &str| BearerToken::new(&SecretString::from(token)).err();
        assert_eq!(new("short"), Some(InvalidToken::TooShort));
        // 15 bytes, though `é` makes it 14 characters: the floor counts bytes.
        assert_eq!(new("0123456789abcé"), Some(InvalidToken::TooShort));
        assert_eq!(new("0123456789abcdé"), None);
        for padded in [" 0123456789abcdef", "0123456789abcdef\n", "\t0123456789abcdef "] {
            assert_eq!(new(padded), Some(InvalidToken::SurroundingWhitespace), "{padded:?}");
        }
    }
}
