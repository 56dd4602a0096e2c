//! Providers: how to tell a real delivery from a forgery, and where each
//! provider puts the event id and type.
//!
//! A provider is one module (its verifier, its event format and its
//! [`ProviderSpec`]) and one name in the `built_in!` list below: its route
//! `/webhooks/{name}`, its secret flag and variable and its place in the
//! [`Registry`] all follow from the spec. Senders that follow the Standard
//! Webhooks spec need no module at all: `STANDARD_WEBHOOKS` names them.

mod config;
pub mod json;
#[cfg(test)]
mod proptests;
mod registry;
pub mod signature;
pub mod standard_sender;
pub mod standard_webhooks;
pub mod timestamped;

use std::sync::Arc;

use axum::http::HeaderMap;
use secrecy::SecretString;

use crate::event::{Event, EventError};
pub use config::{ConfigError, ProviderConfig, StandardSenders};
pub use registry::Registry;
pub use signature::{InvalidSecret, KeyEncoding, KeyError, SignatureError};

/// Declares the built-in provider modules and lists their specs in [`BUILT_IN`].
macro_rules! built_in {
    ($($module:ident),+ $(,)?) => {
        $(pub mod $module;)+

        /// Every built-in provider, in the order of `--help` and the startup log.
        pub const BUILT_IN: &[&ProviderSpec] = &[$(&$module::SPEC),+];
    };
}

// Adding a provider: its module, and its name here.
built_in!(paddle, clerk, stripe, github);

/// What the rest of the service needs to know about a built-in provider.
#[derive(Debug)]
pub struct ProviderSpec {
    /// The name stored in the `provider` column; also the route
    /// `/webhooks/{name}` and the secret variable `{NAME}_WEBHOOK_SECRET`.
    pub name: &'static str,
    /// Further routes the provider answers on (routes published before `/webhooks/{name}`).
    pub aliases: &'static [&'static str],
    /// What the secrets are and where the provider shows them, for `--help`.
    pub secret_help: &'static str,
    /// Builds the provider from its secrets (at least one) and the timestamp tolerance in seconds.
    pub build: BuildProvider,
}

/// How a [`ProviderSpec`] builds its provider.
pub type BuildProvider = fn(&[SecretString], u64) -> Result<Arc<dyn Provider>, InvalidSecret>;

impl ProviderSpec {
    /// The environment variable holding the provider's secrets, e.g. `STRIPE_WEBHOOK_SECRET`.
    pub fn secret_variable(&self) -> String {
        format!("{}_WEBHOOK_SECRET", self.name.to_ascii_uppercase())
    }
}

/// True when `name` is a built-in provider, configured or not.
pub fn is_built_in(name: &str) -> bool {
    BUILT_IN.iter().any(|spec| spec.name == name)
}

/// A provider, without secrets, that reads the stored deliveries of the
/// provider called `name` back (`parse_event`) and verifies nothing:
/// reprocessing uses it, so it needs no secret. A name that is not built in
/// can only have come from a Standard Webhooks sender.
pub fn reader(name: &str) -> Option<Arc<dyn Provider>> {
    match BUILT_IN.iter().find(|spec| spec.name == name) {
        Some(spec) => (spec.build)(&[], 0).ok(),
        None => standard_sender::StandardWebhooksSender::new(name, &[], 0)
            .ok()
            .map(|sender| Arc::new(sender) as Arc<dyn Provider>),
    }
}

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
    /// archived delivery back, of which only the payload, the event id and
    /// the event type are stored. Providers that send the id or type in a
    /// header put them there.
    fn stored_headers(&self, _event_id: &str, _event_type: &str) -> HeaderMap {
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
