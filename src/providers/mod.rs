//! Providers: how to tell a real delivery from a forgery, and where each
//! provider puts the event id and type. A provider is one module.

pub mod clerk;
pub mod paddle;
pub mod signature;
pub mod standard_webhooks;

use axum::http::HeaderMap;

use crate::event::{Event, EventError};
pub use signature::SignatureError;

/// What verification tells the archive about a request.
#[derive(Debug, PartialEq, Eq)]
pub struct Verified<'h> {
    /// Position (0-based) of the configured secret that matched.
    pub secret_index: usize,
    /// The signature header as received.
    pub signature: &'h str,
}

/// A webhook sender: verification over the raw body, then event extraction.
pub trait Provider: Send + Sync + std::fmt::Debug {
    /// The name stored in the `provider` column and shown in logs.
    fn name(&self) -> &str;

    /// Checks that the request was signed by the provider with one of the
    /// configured secrets, at a time within the window around `now` (unix
    /// seconds). Runs on the raw bytes, before anything parses them.
    fn verify<'h>(
        &self,
        headers: &'h HeaderMap,
        body: &[u8],
        now: i64,
    ) -> Result<Verified<'h>, SignatureError>;

    /// Reads the event id, type and data out of a verified request.
    fn parse_event<'a>(&self, headers: &'a HeaderMap, body: &'a [u8]) -> Result<Event<'a>, EventError>;

    /// The headers [`parse_event`](Provider::parse_event) needs to read an
    /// archived delivery back, of which only the payload and the event id are
    /// stored. Providers that send the event id in a header put it there.
    fn stored_headers(&self, _event_id: &str) -> HeaderMap {
        HeaderMap::new()
    }
}

/// A required header as text; absent → missing, not visible ASCII → malformed.
fn header_str<'h>(headers: &'h HeaderMap, name: &'static str) -> Result<&'h str, SignatureError> {
    headers
        .get(name)
        .ok_or(SignatureError::MissingHeader(name))?
        .to_str()
        .map_err(|_| SignatureError::MalformedHeader(name))
}

/// The providers this process accepts deliveries from, by name. A provider
/// without a configured secret is absent, and its route answers 503.
#[derive(Debug, Default, Clone)]
pub struct Registry(Vec<std::sync::Arc<dyn Provider>>);

impl Registry {
    /// Enables a provider.
    pub fn with(mut self, provider: impl Provider + 'static) -> Self {
        self.0.push(std::sync::Arc::new(provider));
        self
    }

    /// The enabled provider called `name`.
    pub fn get(&self, name: &str) -> Option<&std::sync::Arc<dyn Provider>> {
        self.0.iter().find(|provider| provider.name() == name)
    }

    /// Every provider this build supports, with no secret: each can read a
    /// stored payload back (`parse_event`), none can verify anything.
    /// Reprocessing uses these, so it needs no secret.
    pub fn for_reading() -> Self {
        Registry::default()
            .with(paddle::Paddle::new(&[], 0))
            .with(clerk::Clerk::new(&[], 0).expect("no secret to decode"))
    }

    /// Names of the enabled providers, for the startup log.
    pub fn names(&self) -> Vec<&str> {
        self.0.iter().map(|provider| provider.name()).collect()
    }
}
