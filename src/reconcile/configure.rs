//! The providers' logs built from their configuration (`config::ApiConfig`):
//! which providers have a log, and what each needs to be read.

use reqwest::Url;
use secrecy::{ExposeSecret, SecretString};

use super::client::ApiClient;
use super::github::{GitHubHook, HookScope};
use super::paddle::PaddleLog;
use super::stripe::StripeLog;
use crate::config::{ApiConfig, ReconcileConfig};

/// The providers `reconcile` reads from their APIs (the others get their
/// gap), in the order `serve` reconciles them: the one list the command's
/// help, `serve` and [`Log::configure`] go by.
pub const PROVIDERS: [&str; 3] = ["paddle", "stripe", "github"];

/// Why a provider's log cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LogError {
    /// Its key (or token) is not set.
    #[error("{setting} is not set: reconciling {provider} needs its API key")]
    NoKey {
        /// The provider.
        provider: &'static str,
        /// The setting to set.
        setting: &'static str,
    },
    /// GitHub's hook is not named, or named twice.
    #[error("reconciling github needs its hook: {0}")]
    NoHook(&'static str),
    /// The provider has no event log this service can read.
    #[error("{0} has no event API to read")]
    NoLog(String),
}

/// A provider's log, as configured.
#[derive(Debug)]
pub enum Log {
    /// Paddle's `/events`.
    Paddle(PaddleLog),
    /// Stripe's `/v1/events`.
    Stripe(StripeLog),
    /// A GitHub hook's deliveries.
    GitHub(GitHubHook),
}

impl Log {
    /// The event log of `provider` as `config` sets it up, its API client
    /// built on `http`.
    pub fn configure(config: &ApiConfig, provider: &str, http: reqwest::Client) -> Result<Log, LogError> {
        match provider {
            "paddle" => {
                let api =
                    api(http, "paddle", &config.paddle_api_url, &config.paddle_api_key, "PADDLE_API_KEY")?;
                Ok(Log::Paddle(PaddleLog::new(api)))
            }
            "stripe" => {
                let api =
                    api(http, "stripe", &config.stripe_api_url, &config.stripe_api_key, "STRIPE_API_KEY")?;
                Ok(Log::Stripe(StripeLog::new(api)))
            }
            "github" => {
                let api = api(
                    http,
                    "github",
                    &config.github_api_url,
                    &config.github_api_token,
                    "GITHUB_API_TOKEN",
                )?;
                let hook_id = config.github_hook_id.ok_or(LogError::NoHook("set GITHUB_HOOK_ID"))?;
                let scope =
                    HookScope::parse(config.github_hook_repo.as_deref(), config.github_hook_org.as_deref())
                        .ok_or(LogError::NoHook(
                        "set GITHUB_HOOK_REPO (owner/name) or GITHUB_HOOK_ORG (a name), one of them",
                    ))?;
                Ok(Log::GitHub(GitHubHook::new(api, &scope, hook_id)))
            }
            other => Err(LogError::NoLog(other.to_string())),
        }
    }

    /// The logs `serve` reconciles every `RECONCILE_INTERVAL_SECS`, each
    /// with its API client built on `http`: those with a key, none when off.
    pub fn periodic(config: &ReconcileConfig, http: &reqwest::Client) -> Vec<Log> {
        if config.reconcile_interval_secs == 0 {
            return Vec::new();
        }
        PROVIDERS
            .into_iter()
            .filter_map(|provider| match Log::configure(&config.api, provider, http.clone()) {
                Ok(log) => Some(log),
                Err(LogError::NoKey { .. }) => None,
                Err(error) => {
                    tracing::warn!(%error, "{provider} is not reconciled");
                    None
                }
            })
            .collect()
    }
}

/// A client of `provider`'s API, if its key is set (and not empty).
fn api(
    http: reqwest::Client,
    provider: &'static str,
    url: &Url,
    key: &Option<SecretString>,
    setting: &'static str,
) -> Result<ApiClient, LogError> {
    match key.as_ref().filter(|key| !key.expose_secret().trim().is_empty()) {
        Some(key) => Ok(ApiClient::new(http, provider, url.clone(), key.clone(), setting)),
        None => Err(LogError::NoKey { provider, setting }),
    }
}
