//! Providers: how to tell a real delivery from a forgery, and how each
//! provider lays out its events.
//!
//! Two capabilities, kept apart. A [`Provider`] holds secrets and verifies
//! requests; the [`Registry`] holds the enabled ones, by name. An
//! [`EventFormat`] holds no secret and reads events, from a verified
//! request or from an archived delivery; [`format_of`] finds any provider's
//! format by its name, so reprocessing needs no secret and fakes no request.
//!
//! Adding a provider: its module, which describes it (a [`ProviderSpec`]:
//! its name, routes, signature scheme, and the [`EventLayout`] of its events),
//! its `pub mod` line and its spec in [`BUILT_IN`]. Its route
//! `/webhooks/{name}`, its secret flag and variable, its verifier and its
//! place in the registry follow from the spec. Senders that follow the
//! Standard Webhooks spec need no module at all: `STANDARD_WEBHOOKS` names
//! them.

mod config;
pub mod hmac_header;
#[cfg(test)]
mod proptests;
mod registry;
pub mod signature;
pub mod standard_sender;
pub mod standard_webhooks;

pub mod clerk;
pub mod github;
pub mod paddle;
pub mod stripe;

use std::sync::Arc;

use axum::http::HeaderMap;
use secrecy::SecretString;

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use serde_json::value::RawValue;

use crate::event::{self, Event, EventError, Payload};
pub use config::{ConfigError, ProviderConfig, SecretList, StandardSenders};
pub use registry::Registry;
pub use signature::{InvalidSecret, KeyEncoding, KeyError, SignatureError};

/// Every built-in provider, in the order of `--help` and the startup log.
pub const BUILT_IN: &[&ProviderSpec] = &[&paddle::SPEC, &clerk::SPEC, &stripe::SPEC, &github::SPEC];

/// The description of a built-in provider: everything the rest of the
/// service needs to know about it, as data.
#[derive(Debug)]
pub struct ProviderSpec {
    /// The name stored in the `provider` column; also the route
    /// `/webhooks/{name}` and the secret variable `{NAME}_WEBHOOK_SECRET`.
    pub name: &'static str,
    /// Further routes the provider answers on (routes published before `/webhooks/{name}`).
    pub aliases: &'static [&'static str],
    /// What the secrets are and where the provider shows them, for `--help`.
    pub secret_help: &'static str,
    /// How it signs its requests.
    pub signature: Signature,
    /// How its events are laid out.
    pub format: &'static dyn EventFormat,
}

/// How a built-in provider signs its requests: one of the schemes this
/// module verifies, laid out the provider's way.
#[derive(Debug)]
pub enum Signature {
    /// Hex HMACs in one header, of a timestamp and the body or of the body
    /// alone (Paddle, Stripe, GitHub).
    HmacHeader(&'static hmac_header::Format),
    /// Standard Webhooks (Svix): `webhook-*` or `svix-*` headers, `whsec_` secrets (Clerk).
    StandardWebhooks,
}

impl ProviderSpec {
    /// The environment variable holding the provider's secrets, e.g. `STRIPE_WEBHOOK_SECRET`.
    pub fn secret_variable(&self) -> String {
        format!("{}_WEBHOOK_SECRET", self.name.to_ascii_uppercase())
    }

    /// The provider's verifier, with its secrets (at least one) and the
    /// timestamp tolerance in seconds.
    pub fn verifier(
        &self,
        secrets: &[SecretString],
        tolerance_secs: u64,
    ) -> Result<Arc<dyn Provider>, InvalidSecret> {
        Ok(match self.signature {
            Signature::HmacHeader(format) => {
                Arc::new(hmac_header::HmacHeaderVerifier::new(format, secrets, tolerance_secs)?)
            }
            Signature::StandardWebhooks => {
                Arc::new(standard_sender::StandardWebhooksSender::new(self.name, secrets, tolerance_secs)?)
            }
        })
    }
}

/// True when `name` is a built-in provider, configured or not.
pub fn is_built_in(name: &str) -> bool {
    BUILT_IN.iter().any(|spec| spec.name == name)
}

/// The event format of the provider called `name`: a built-in one's own, and
/// for any other name the Standard Webhooks format (the registry enables no
/// other, so no other can have sent or stored a delivery).
pub fn format_of(name: &str) -> &'static dyn EventFormat {
    BUILT_IN
        .iter()
        .find(|spec| spec.name == name)
        .map_or(&standard_sender::StandardFormat, |spec| spec.format)
}

/// What verification tells the archive about a request.
#[derive(Debug, PartialEq, Eq)]
pub struct Verified<'h> {
    /// Position (0-based) of the configured secret that matched.
    pub secret_index: usize,
    /// The signature header as received.
    pub signature: &'h str,
}

/// A webhook sender with its secrets: verifies requests over the raw body.
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
}

/// Where a provider puts the event id, type, time and data: reads events,
/// and knows no secret.
pub trait EventFormat: Send + Sync + std::fmt::Debug {
    /// The event of a verified request, from its headers and payload.
    fn read_request(&self, headers: &HeaderMap, payload: &Payload) -> Result<Event, EventError>;

    /// The event of an archived delivery: the id and type the archive
    /// recorded for it (wherever the request carried them), the rest from
    /// its stored payload.
    fn read_stored(&self, event_id: &str, event_type: &str, payload: &Payload) -> Result<Event, EventError>;
}

/// How a provider lays out its events in a JSON body: the type of its
/// top-level fields (its `Envelope`), which says where the id, type, time
/// and data are. Every layout is an [`EventFormat`].
pub trait EventLayout: Send + Sync + std::fmt::Debug + 'static {
    /// The body's top level, as the provider documents it.
    type Envelope<'a>: TopLevel<'a>;
}

impl<L: EventLayout> EventFormat for L {
    fn read_request(&self, headers: &HeaderMap, payload: &Payload) -> Result<Event, EventError> {
        let mut envelope = L::Envelope::read(payload)?;
        let event = envelope.identify(headers)?;
        envelope.complete(event)
    }

    fn read_stored(&self, event_id: &str, event_type: &str, payload: &Payload) -> Result<Event, EventError> {
        L::Envelope::stored(payload, event_id, event_type)
    }
}

/// A provider's top-level event fields (its `Envelope`), read from a
/// payload, and what they add to an event whose id and type are known.
pub trait TopLevel<'a>: serde::Deserialize<'a> {
    /// The format's name in [`EventError::NotAnEvent`].
    const FORMAT: &'static str;

    /// The event's id and type, each with the field it is read from (for
    /// the errors): taken out of the envelope, or from the request's signed
    /// headers. Both are required.
    fn id_and_type<'s>(&'s mut self, headers: &'s HeaderMap) -> [(Option<Cow<'s, str>>, &'static str); 2];

    /// When the event happened, if the envelope says.
    fn occurred_at(&self) -> Result<Option<DateTime<Utc>>, EventError>;

    /// The event's `data`, if any.
    fn data(&self) -> Option<&RawValue>;

    /// `event` with whatever else the envelope adds: nothing, but for
    /// Paddle's notification id.
    fn extra(&mut self, event: Event) -> Result<Event, EventError> {
        Ok(event)
    }

    /// The event of a verified request.
    fn identify(&mut self, headers: &HeaderMap) -> Result<Event, EventError> {
        let [(id, id_field), (event_type, type_field)] = self.id_and_type(headers);
        Ok(Event::new(event::required(id, id_field)?, event::required(event_type, type_field)?))
    }

    /// `event` with what the envelope adds (time, data, the rest).
    fn complete(mut self, event: Event) -> Result<Event, EventError> {
        let occurred_at = self.occurred_at()?;
        let data = event::data(self.data());
        Ok(Event { occurred_at, data, ..self.extra(event)? })
    }

    /// The envelope of `payload`.
    fn read(payload: &'a Payload) -> Result<Self, EventError> {
        envelope(payload, Self::FORMAT)
    }

    /// The event of an archived delivery: the id and type the archive
    /// recorded, the rest from its payload ([`EventFormat::read_stored`]).
    fn stored(payload: &'a Payload, event_id: &str, event_type: &str) -> Result<Event, EventError> {
        Self::read(payload)?.complete(Event::new(event_id.into(), event_type.into()))
    }
}

/// The top-level fields of a provider's event body (its `Envelope`); a body
/// of another shape is not an event of `format`.
fn envelope<'a, T: serde::Deserialize<'a>>(
    payload: &'a Payload,
    format: &'static str,
) -> Result<T, EventError> {
    serde_json::from_str(payload.as_str()).map_err(|e| EventError::from_json(&e, format))
}

/// A required header as text; absent → missing, not visible ASCII → malformed.
fn header_str<'h>(headers: &'h HeaderMap, name: &'static str) -> Result<&'h str, SignatureError> {
    headers
        .get(name)
        .ok_or(SignatureError::MissingHeader(name))?
        .to_str()
        .map_err(|_| SignatureError::MalformedHeader(name))
}

/// A test's body as a checked payload.
#[cfg(test)]
fn payload(body: &[u8]) -> Payload {
    Payload::try_from(String::from_utf8(body.to_vec()).expect("UTF-8")).expect("no repeated key")
}

/// A test's verifier of `spec`, with `secrets` and a 300 s tolerance.
#[cfg(test)]
fn test_verifier(spec: &ProviderSpec, secrets: &[&str]) -> Arc<dyn Provider> {
    let secrets: Vec<SecretString> = secrets.iter().map(|secret| SecretString::from(*secret)).collect();
    spec.verifier(&secrets, 300).unwrap()
}

/// A test's request headers.
#[cfg(test)]
fn test_headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in pairs {
        headers.insert(*name, axum::http::HeaderValue::from_str(value).unwrap());
    }
    headers
}

/// Asserts that `spec`'s verifier with `secret` accepts `signed` over
/// `body` at `now`, and refuses it once any one byte of the body, or of the
/// secret, is changed.
#[cfg(test)]
fn assert_only_the_signed_body_verifies(
    spec: &ProviderSpec,
    secret: &str,
    signed: &HeaderMap,
    body: &str,
    now: i64,
) {
    let verified = test_verifier(spec, &[secret]).verify(signed, body.as_bytes(), now);
    assert_eq!(verified.map(|v| v.secret_index), Ok(0), "{body}");
    for i in 0..body.len() {
        let mut tampered = body.as_bytes().to_vec();
        tampered[i] ^= 0x01;
        assert!(
            test_verifier(spec, &[secret]).verify(signed, &tampered, now).is_err(),
            "byte {i} of the body"
        );
    }
    for i in 0..secret.len() {
        let mut wrong = secret.as_bytes().to_vec();
        wrong[i] ^= 0x01;
        let wrong = String::from_utf8(wrong).unwrap();
        let refused = test_verifier(spec, &[&wrong]).verify(signed, body.as_bytes(), now).unwrap_err();
        assert_eq!(refused, SignatureError::NoMatchingSignature, "byte {i} of the secret");
    }
}
