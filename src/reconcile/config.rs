//! The providers' API keys and URLs: flags with environment fallbacks,
//! shared by `reconcile` and `serve`.

use clap::Args;
use reqwest::Url;
use secrecy::{ExposeSecret, SecretString};

use super::client::ApiClient;
use super::paddle::PaddleLog;
use super::stripe::StripeLog;

/// The event APIs reconciliation reads.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Reconciliation (the providers' event APIs)")]
pub struct ApiConfig {
    /// Paddle API key (Developer tools > Authentication), read-only access to events is enough.
    #[arg(long, env = "PADDLE_API_KEY", hide_env_values = true, value_parser = secret)]
    pub paddle_api_key: Option<SecretString>,

    /// Paddle API base URL: https://api.paddle.com, or https://sandbox-api.paddle.com for the sandbox.
    #[arg(long, env = "PADDLE_API_URL", default_value = "https://api.paddle.com")]
    pub paddle_api_url: Url,

    /// Stripe secret or restricted key (`sk_...` or `rk_...` with read access to events).
    #[arg(long, env = "STRIPE_API_KEY", hide_env_values = true, value_parser = secret)]
    pub stripe_api_key: Option<SecretString>,

    /// Stripe API base URL.
    #[arg(long, env = "STRIPE_API_URL", default_value = "https://api.stripe.com")]
    pub stripe_api_url: Url,
}

/// Reconciliation inside `serve`: the APIs, and how often.
#[derive(Debug, Clone, Args)]
pub struct PeriodicConfig {
    /// The event APIs.
    #[command(flatten)]
    pub api: ApiConfig,

    /// Seconds between two reconciliations of each provider whose API key is set (PADDLE_API_KEY, STRIPE_API_KEY), the first at startup; every replica may run it, one at a time reads a provider. 0: off.
    #[arg(
        long,
        env = "RECONCILE_INTERVAL_SECS",
        default_value_t = 0,
        help_heading = "Reconciliation (the providers' event APIs)"
    )]
    pub reconcile_interval_secs: u64,
}

impl PeriodicConfig {
    /// The logs to reconcile periodically, each with its API client built
    /// on `http`: none when off.
    pub fn logs(&self, http: &reqwest::Client) -> Vec<Log> {
        if self.reconcile_interval_secs == 0 {
            return Vec::new();
        }
        ["paddle", "stripe"]
            .into_iter()
            .filter_map(|provider| self.api.log(provider, http.clone()).ok())
            .collect()
    }
}

/// Why a provider's log cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LogError {
    /// Its key is not set.
    #[error("{setting} is not set: reconciling {provider} needs its API key")]
    NoKey {
        /// The provider.
        provider: &'static str,
        /// The setting to set.
        setting: &'static str,
    },
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
}

impl ApiConfig {
    /// The event log of `provider`, its API client built on `http`.
    pub fn log(&self, provider: &str, http: reqwest::Client) -> Result<Log, LogError> {
        match provider {
            "paddle" => {
                let api = api(http, "paddle", &self.paddle_api_url, &self.paddle_api_key, "PADDLE_API_KEY")?;
                Ok(Log::Paddle(PaddleLog::new(api)))
            }
            "stripe" => {
                let api = api(http, "stripe", &self.stripe_api_url, &self.stripe_api_key, "STRIPE_API_KEY")?;
                Ok(Log::Stripe(StripeLog::new(api)))
            }
            other => Err(LogError::NoLog(other.to_string())),
        }
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

fn secret(text: &str) -> Result<SecretString, std::convert::Infallible> {
    Ok(SecretString::from(text))
}
