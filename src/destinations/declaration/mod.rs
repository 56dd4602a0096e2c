//! The declaration: destinations as the team writes them in its deploy
//! repository, a TOML file named by `--config` (`CONFIG_FILE`), checked
//! whole at startup so that a mistake stops the process with the line and
//! the field, instead of surfacing as events that never arrive.
//!
//! ```toml
//! [[destinations]]
//! name = "billing-app"
//! url = "https://billing.internal.example/webhooks/inbox"
//! secret = "${BILLING_APP_WEBHOOK_SECRET}"   # or a list, while rotating
//! events = ["paddle:subscription.*", "clerk:user.*"]
//! timeout = "15s"
//! retry_schedule = ["5s", "5m", "30m", "2h", "5h", "10h", "10h"]
//! rate_limit = 50                             # requests/s, all replicas together
//! ordering = "key"                            # or "entity", or "none"
//! ordering_key = { paddle = "/data/customer_id" }  # JSON pointers (`ordering_key`)
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use secrecy::{SecretSlice, SecretString};
use serde::Deserialize;
use toml::Spanned;

use super::ordering_key::OrderingKey;
use super::patterns::EventPattern;
use crate::providers::KeyEncoding;
use crate::queue::Schedule;

/// Svix's schedule, which Clerk's and most senders' receivers are used to:
/// the first attempt at once, then these delays; about 28 hours in all.
const DEFAULT_SCHEDULE: [&str; 7] = ["5s", "5m", "30m", "2h", "5h", "10h", "10h"];

/// How much each retry delay is spread (±20 %), so that the jobs of a
/// receiver that was down do not all come back at the same instant.
const JITTER: f64 = 0.2;

/// A request's default timeout (Svix's).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);

/// The longest timeout accepted: a claim's lease is longer than it.
const MAX_TIMEOUT: Duration = Duration::from_secs(300);

/// The longest retry delay and circuit cooldown accepted. Why a bound:
/// each is added to the current time, and one past what a timestamp holds
/// (`"300000y"`) would fail every send of the destination; a week is far
/// beyond any schedule a receiver needs (Svix's whole schedule is 28 hours).
const MAX_DELAY: Duration = Duration::from_secs(7 * 24 * 3600);

/// Requests in flight at once per destination and replica, by default.
const DEFAULT_CONCURRENCY: usize = 10;

/// Consecutive failed attempts that open the circuit, by default.
const DEFAULT_CIRCUIT_FAILURES: u32 = 10;

/// How long an open circuit waits before its probe, by default.
const DEFAULT_CIRCUIT_COOLDOWN: Duration = Duration::from_secs(60);

/// How a destination orders the events it receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Ordering {
    /// As fast as they come, several at once.
    None,
    /// The events of one entity one at a time, in the order they were
    /// recorded; other entities' events flow meanwhile.
    Entity,
    /// Like `Entity`, by the key the destination declares per provider
    /// (`ordering_key`, e.g. the customer).
    Key,
}

/// When the circuit breaker opens, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Circuit {
    /// Consecutive failed attempts that open it.
    pub failures: u32,
    /// How long it stays open before one probe is let through.
    pub cooldown: Duration,
}

/// One declared destination, checked.
pub struct Destination {
    /// Its name: 1 to 64 of `a-z 0-9 - _`, unique.
    pub name: String,
    /// Where events are POSTed.
    pub url: reqwest::Url,
    /// Signing keys, in declared order; each signs every request (rotation).
    keys: Vec<SecretSlice<u8>>,
    /// Which events go there.
    pub events: Vec<EventPattern>,
    /// Longest an attempt may take, connection included.
    pub timeout: Duration,
    /// When failed attempts are tried again, and when a job is dead.
    pub schedule: Schedule,
    /// Requests per second, all replicas together; `None`: unlimited.
    pub rate_limit: Option<f64>,
    /// How events are ordered.
    pub ordering: Ordering,
    /// Where each provider's key is, with `Ordering::Key` (only then).
    pub ordering_key: Option<OrderingKey>,
    /// Requests in flight at once per replica.
    pub concurrency: usize,
    /// The circuit breaker's settings.
    pub circuit: Circuit,
}

impl std::fmt::Debug for Destination {
    /// Leaves the keys out.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Destination")
            .field("name", &self.name)
            .field("url", &self.shown_url())
            .field("keys", &format_args!("[REDACTED; {}]", self.keys.len()))
            .field("events", &self.events)
            .field("ordering", &self.ordering)
            .finish_non_exhaustive()
    }
}

impl Destination {
    /// Whether events of `event_type` from `provider` go here.
    pub fn wants(&self, provider: &str, event_type: &str) -> bool {
        self.events.iter().any(|pattern| pattern.matches(provider, event_type))
    }

    /// The signing keys.
    pub fn keys(&self) -> &[SecretSlice<u8>] {
        &self.keys
    }

    /// The URL as logs, errors and listings show it: scheme, host, port and
    /// path. Why not the rest: apps often put a token in the query string
    /// (or a password in the userinfo), and none of it says where events go.
    pub fn shown_url(&self) -> String {
        format!("{}{}", self.url.origin().ascii_serialization(), self.url.path())
    }
}

/// Every declared destination.
#[derive(Debug, Default, Clone)]
pub struct Declaration {
    destinations: Vec<Arc<Destination>>,
}

/// Why the declaration cannot be used: names the file, line and field.
#[derive(Debug, thiserror::Error)]
#[error("{file}{}: {problem}", .line.map(|line| format!(", line {line}")).unwrap_or_default())]
pub struct DeclarationError {
    /// The file, as named.
    pub file: String,
    /// Where the problem is, when known.
    pub line: Option<usize>,
    /// What is wrong, naming the destination and field; never a secret.
    pub problem: String,
}

impl Declaration {
    /// Reads and checks the file at `path`; secrets written `${NAME}` are
    /// read from the environment.
    pub fn load(path: &Path) -> Result<Declaration, DeclarationError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| DeclarationError {
            file: file.clone(),
            line: None,
            problem: error.to_string(),
        })?;
        Declaration::parse(&text, &file, |name| std::env::var(name).ok())
    }

    /// Parses and checks `text` (from `file`), reading `${NAME}` secrets with `env`.
    pub fn parse(
        text: &str,
        file: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Declaration, DeclarationError> {
        let error = |span: Option<std::ops::Range<usize>>, problem: String| DeclarationError {
            file: file.to_string(),
            line: span.map(|span| line_of(text, span.start)),
            problem,
        };
        let raw: RawFile = toml::from_str(text).map_err(|e| error(e.span(), e.message().to_string()))?;
        let mut destinations: Vec<Arc<Destination>> = Vec::new();
        for raw in raw.destinations {
            let name = raw.name.get_ref().clone();
            let field = |field: &str, span: std::ops::Range<usize>, problem: String| {
                error(Some(span), format!("destination {name:?}, `{field}`: {problem}"))
            };
            if !valid_name(&name) {
                return Err(field("name", raw.name.span(), "must be 1 to 64 of a-z 0-9 - _".into()));
            }
            if destinations.iter().any(|d| d.name == name) {
                return Err(field("name", raw.name.span(), "is declared twice".into()));
            }
            let url = reqwest::Url::parse(raw.url.get_ref())
                .ok()
                .filter(|url| matches!(url.scheme(), "http" | "https") && url.host().is_some())
                .ok_or_else(|| field("url", raw.url.span(), "is not an http:// or https:// URL".into()))?;
            let secrets = match raw.secret.get_ref() {
                Secrets::One(one) => vec![one.clone()],
                Secrets::Several(several) => several.clone(),
            };
            if secrets.is_empty() {
                return Err(field("secret", raw.secret.span(), "names no secret".into()));
            }
            let mut keys = Vec::new();
            for (index, secret) in secrets.iter().enumerate() {
                let position = if secrets.len() > 1 { format!("#{} ", index + 1) } else { String::new() };
                let value = match secret.strip_prefix("${").and_then(|rest| rest.strip_suffix('}')) {
                    Some(variable) => env(variable).ok_or_else(|| {
                        field(
                            "secret",
                            raw.secret.span(),
                            format!("{position}names ${{{variable}}}, which is not set"),
                        )
                    })?,
                    None => secret.clone(),
                };
                let key = KeyEncoding::Whsec.key(&SecretString::from(value)).map_err(|problem| {
                    field("secret", raw.secret.span(), format!("{position}{problem} (a whsec_... secret)"))
                })?;
                keys.push(key);
            }
            let events = raw
                .events
                .get_ref()
                .iter()
                .map(|pattern| {
                    EventPattern::parse(pattern.get_ref())
                        .map_err(|invalid| field("events", pattern.span(), invalid.to_string()))
                })
                .collect::<Result<Vec<_>, _>>()?;
            if events.is_empty() {
                return Err(field("events", raw.events.span(), "names no event".into()));
            }
            let timeout = match &raw.timeout {
                Some(timeout) => duration(timeout)
                    .filter(|t| (Duration::from_millis(10)..=MAX_TIMEOUT).contains(t))
                    .ok_or_else(|| {
                        field(
                            "timeout",
                            timeout.span(),
                            "must be a duration from 10ms to 5m, like \"15s\"".into(),
                        )
                    })?,
                None => DEFAULT_TIMEOUT,
            };
            let delays = match &raw.retry_schedule {
                Some(schedule) => schedule
                    .get_ref()
                    .iter()
                    .map(|delay| {
                        bounded(delay).ok_or_else(|| {
                            field(
                                "retry_schedule",
                                delay.span(),
                                format!("{:?} is not a duration up to 7d like \"5m\"", delay.get_ref()),
                            )
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                None => DEFAULT_SCHEDULE
                    .iter()
                    .map(|d| humantime::parse_duration(d).expect("valid default"))
                    .collect(),
            };
            let schedule = Schedule::new(delays, JITTER).expect("the jitter is a fraction");
            let rate_limit = match &raw.rate_limit {
                Some(rate) if rate.get_ref().is_finite() && *rate.get_ref() > 0.0 => Some(*rate.get_ref()),
                Some(rate) => {
                    return Err(field(
                        "rate_limit",
                        rate.span(),
                        "must be a number of requests per second above 0".into(),
                    ));
                }
                None => None,
            };
            let ordering = match raw.ordering.as_ref().map(|o| (o.get_ref().as_str(), o.span())) {
                None | Some(("none", _)) => Ordering::None,
                Some(("entity", _)) => Ordering::Entity,
                Some(("key", _)) => Ordering::Key,
                Some((_, span)) => {
                    return Err(field("ordering", span, "must be \"none\", \"entity\" or \"key\"".into()));
                }
            };
            let ordering_key = match (&raw.ordering_key, ordering) {
                (None, Ordering::Key) => Some(OrderingKey::new([]).expect("valid defaults")),
                (None, _) => None,
                (Some(declared), Ordering::Key) => {
                    let pointers = declared.get_ref();
                    let declared = pointers
                        .iter()
                        .map(|(provider, pointer)| (provider.as_str(), pointer.get_ref().as_str()));
                    Some(OrderingKey::new(declared).map_err(|(provider, invalid)| {
                        field(
                            &format!("ordering_key.{provider}"),
                            pointers[&provider].span(),
                            invalid.to_string(),
                        )
                    })?)
                }
                (Some(declared), _) => {
                    return Err(field(
                        "ordering_key",
                        declared.span(),
                        "is read only with ordering = \"key\"".into(),
                    ));
                }
            };
            let concurrency = match &raw.concurrency {
                Some(n) => usize::try_from(*n.get_ref())
                    .ok()
                    .filter(|n| (1..=1000).contains(n))
                    .ok_or_else(|| field("concurrency", n.span(), "must be from 1 to 1000".into()))?,
                None => DEFAULT_CONCURRENCY,
            };
            let circuit = match &raw.circuit_breaker {
                Some(circuit) => {
                    let RawCircuit { failures, cooldown } = circuit.get_ref();
                    let failures = failures
                        .as_ref()
                        .map(|n| {
                            u32::try_from(*n.get_ref()).ok().filter(|n| *n >= 1).ok_or_else(|| {
                                field("circuit_breaker.failures", n.span(), "must be at least 1".into())
                            })
                        })
                        .transpose()?
                        .unwrap_or(DEFAULT_CIRCUIT_FAILURES);
                    let cooldown = cooldown
                        .as_ref()
                        .map(|c| {
                            bounded(c).ok_or_else(|| {
                                field(
                                    "circuit_breaker.cooldown",
                                    c.span(),
                                    "is not a duration up to 7d like \"1m\"".into(),
                                )
                            })
                        })
                        .transpose()?
                        .unwrap_or(DEFAULT_CIRCUIT_COOLDOWN);
                    Circuit { failures, cooldown }
                }
                None => Circuit { failures: DEFAULT_CIRCUIT_FAILURES, cooldown: DEFAULT_CIRCUIT_COOLDOWN },
            };
            destinations.push(Arc::new(Destination {
                name,
                url,
                keys,
                events,
                timeout,
                schedule,
                rate_limit,
                ordering,
                ordering_key,
                concurrency,
                circuit,
            }));
        }
        Ok(Declaration { destinations })
    }

    /// No destination: what an environment-only setup has.
    pub fn is_empty(&self) -> bool {
        self.destinations.is_empty()
    }

    /// Every destination, in declared order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Destination>> {
        self.destinations.iter()
    }

    /// The destination called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<Destination>> {
        self.destinations.iter().find(|d| d.name == name)
    }

    /// Refuses a pattern or an ordering key naming a provider that is not
    /// in `known` (a typo would otherwise send nothing, or order nothing,
    /// silently). The ordering key's defaults name providers that may not
    /// be configured: only what the file declares is checked.
    pub fn check_providers(&self, known: &[&str]) -> anyhow::Result<()> {
        for destination in &self.destinations {
            for provider in destination.ordering_key.iter().flat_map(OrderingKey::declared_providers) {
                anyhow::ensure!(
                    known.contains(&provider),
                    "destination {:?}: `ordering_key` names the provider {provider:?}, which is not configured \
                     here (known: {})",
                    destination.name,
                    known.join(", ")
                );
            }
            for pattern in &destination.events {
                anyhow::ensure!(
                    known.contains(&pattern.provider()),
                    "destination {:?}: the event pattern {pattern} names the provider {:?}, which is not \
                     configured here (known: {})",
                    destination.name,
                    pattern.provider(),
                    known.join(", ")
                );
            }
        }
        Ok(())
    }
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// A duration like `5s`, `5m`, `2h`, `100ms`.
fn duration(text: &Spanned<String>) -> Option<Duration> {
    humantime::parse_duration(text.get_ref()).ok()
}

/// A duration up to [`MAX_DELAY`].
fn bounded(text: &Spanned<String>) -> Option<Duration> {
    duration(text).filter(|delay| *delay <= MAX_DELAY)
}

/// The file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    destinations: Vec<RawDestination>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDestination {
    name: Spanned<String>,
    url: Spanned<String>,
    secret: Spanned<Secrets>,
    events: Spanned<Vec<Spanned<String>>>,
    timeout: Option<Spanned<String>>,
    retry_schedule: Option<Spanned<Vec<Spanned<String>>>>,
    rate_limit: Option<Spanned<f64>>,
    ordering: Option<Spanned<String>>,
    ordering_key: Option<Spanned<BTreeMap<String, Spanned<String>>>>,
    concurrency: Option<Spanned<i64>>,
    circuit_breaker: Option<Spanned<RawCircuit>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Secrets {
    One(String),
    Several(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCircuit {
    failures: Option<Spanned<i64>>,
    cooldown: Option<Spanned<String>>,
}

#[cfg(test)]
mod tests;
