//! The providers' API keys and URLs, and how often `serve` reconciles:
//! flags with environment fallbacks, shared by `reconcile` and `serve`.

use clap::Args;
use reqwest::Url;
use secrecy::SecretString;

use super::secret;

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
pub struct ReconcileConfig {
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
