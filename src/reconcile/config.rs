//! The providers' API keys and URLs: flags with environment fallbacks,
//! shared by `reconcile` and `serve`.

use clap::Args;
use reqwest::Url;
use secrecy::{ExposeSecret, SecretString};

use super::client::ApiClient;
use super::github::{GitHubHook, HookScope};
use super::paddle::PaddleLog;
use super::stripe::StripeLog;

/// The providers `reconcile` reads from their APIs (the others get their
/// gap), in the order `serve` reconciles them: the one list the command's
/// help, `serve` and [`ApiConfig::log`] go by.
pub const PROVIDERS: [&str; 3] = ["paddle", "stripe", "github"];

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

    /// GitHub token allowed to read and redeliver the hook's deliveries (repository hook: "Webhooks" read and write; organization hook: "Webhooks" organization permission, or admin:org_hook).
    #[arg(long, env = "GITHUB_API_TOKEN", hide_env_values = true, value_parser = secret)]
    pub github_api_token: Option<SecretString>,

    /// GitHub API base URL (GitHub Enterprise Server: https://HOST/api/v3).
    #[arg(long, env = "GITHUB_API_URL", default_value = "https://api.github.com")]
    pub github_api_url: Url,

    /// The repository whose hook to reconcile, `owner/name` (or GITHUB_HOOK_ORG, not both).
    #[arg(long, env = "GITHUB_HOOK_REPO")]
    pub github_hook_repo: Option<String>,

    /// The organization whose hook to reconcile (or GITHUB_HOOK_REPO, not both).
    #[arg(long, env = "GITHUB_HOOK_ORG")]
    pub github_hook_org: Option<String>,

    /// The hook's id (in its settings page's URL: .../settings/hooks/ID).
    #[arg(long, env = "GITHUB_HOOK_ID")]
    pub github_hook_id: Option<u64>,
}

/// Reconciliation inside `serve`: the APIs, and how often.
#[derive(Debug, Clone, Args)]
pub struct PeriodicConfig {
    /// The event APIs.
    #[command(flatten)]
    pub api: ApiConfig,

    /// Seconds between two reconciliations of each provider whose API key is set (PADDLE_API_KEY, STRIPE_API_KEY, GITHUB_API_TOKEN), the first at startup; every replica may run it, one at a time reads a provider. 0: off.
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
        PROVIDERS
            .into_iter()
            .filter_map(|provider| match self.api.log(provider, http.clone()) {
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
            "github" => {
                let api =
                    api(http, "github", &self.github_api_url, &self.github_api_token, "GITHUB_API_TOKEN")?;
                let hook_id = self.github_hook_id.ok_or(LogError::NoHook("set GITHUB_HOOK_ID"))?;
                let scope =
                    HookScope::parse(self.github_hook_repo.as_deref(), self.github_hook_org.as_deref())
                        .ok_or(LogError::NoHook(
                            "set GITHUB_HOOK_REPO (owner/name) or GITHUB_HOOK_ORG (a name), one of them",
                        ))?;
                Ok(Log::GitHub(GitHubHook::new(api, &scope, hook_id)))
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
