//! The providers' APIs, called with a key: timeouts, retries with backoff on
//! 5xx and network errors, `Retry-After` on 429, and a 401/403 that names
//! the setting holding the key. The key is only ever a request header: never
//! logged, never in an error.

use std::time::Duration;

use reqwest::header::{AUTHORIZATION, HeaderMap, RETRY_AFTER};
use reqwest::{Method, StatusCode, Url};
use secrecy::{ExposeSecret, SecretString};

/// Longest one request may take, connection included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Attempts per request when the API fails (5xx, network), the first included.
const MAX_ATTEMPTS: u32 = 5;

/// The wait after the first failure; it doubles after each.
const BACKOFF_BASE: Duration = Duration::from_millis(500);

/// Longest wait between two attempts, `Retry-After` included: a longer
/// `Retry-After` is waited only this long (the next 429 says again).
const BACKOFF_CAP: Duration = Duration::from_secs(60);

/// 429s answered in a row before the run gives up.
const MAX_RATE_LIMITED: u32 = 10;

/// Most bytes of a provider's error answer quoted in an error.
const QUOTED_ERROR_BYTES: usize = 300;

/// Most bytes of one page. A real page is far smaller (Paddle's 200 events
/// or Stripe's 100 run to a few MB at most); the bound keeps an API that
/// sends more (a huge or endless body) from taking the process's memory.
pub const MAX_PAGE_BYTES: usize = 64 * 1024 * 1024;

/// Why a provider's API could not be read. Nothing in it quotes the key.
#[derive(Debug, thiserror::Error)]
pub enum ProviderApiError {
    /// The key was refused: the message names the setting to fix.
    #[error("the {provider} API refused the key ({status}): check {setting}")]
    Unauthorized {
        /// The provider.
        provider: &'static str,
        /// 401 or 403.
        status: StatusCode,
        /// The setting holding the key, e.g. `PADDLE_API_KEY`.
        setting: &'static str,
    },
    /// Any other answer the request cannot succeed after (a 4xx).
    #[error("the {provider} API answered {status} to {path}: {message}")]
    Refused {
        /// The provider.
        provider: &'static str,
        /// The status.
        status: StatusCode,
        /// The path asked, without the query.
        path: String,
        /// The start of the answer's body.
        message: String,
    },
    /// 5xx, network errors or 429s until the attempts ran out.
    #[error("the {provider} API failed {attempts} times in a row, the last: {last}")]
    GaveUp {
        /// The provider.
        provider: &'static str,
        /// How many attempts were made.
        attempts: u32,
        /// The last failure.
        last: String,
    },
    /// A page larger than [`MAX_PAGE_BYTES`]: the run stops rather than
    /// read on.
    #[error("the {provider} API answered a page larger than {limit} bytes: reading stopped there")]
    TooLarge {
        /// The provider.
        provider: &'static str,
        /// The limit, [`MAX_PAGE_BYTES`].
        limit: usize,
    },
    /// The answer is not what the API documents.
    #[error("the {provider} API answered something unexpected: {problem}")]
    Unexpected {
        /// The provider.
        provider: &'static str,
        /// What was wrong.
        problem: UnexpectedAnswer,
    },
}

/// What was wrong with an answer.
#[derive(Debug, thiserror::Error)]
pub enum UnexpectedAnswer {
    /// Not the JSON the API documents.
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// A next page on another origin than the API's: the key is not sent there.
    #[error("a next page on another origin ({0})")]
    ForeignNextPage(String),
}

/// One successful answer.
#[derive(Debug)]
pub struct Answer {
    /// The body.
    pub body: bytes::Bytes,
    /// The answer's headers (request ids).
    pub headers: HeaderMap,
}

/// One provider's API with its key.
#[derive(Clone)]
pub struct ApiClient {
    http: reqwest::Client,
    provider: &'static str,
    base: Url,
    key: SecretString,
    setting: &'static str,
    /// Headers the provider asks every request to carry (GitHub's API version).
    headers: HeaderMap,
}

impl std::fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiClient").field("provider", &self.provider).field("base", &self.base).finish()
    }
}

impl ApiClient {
    /// A client of `provider`'s API at `base`, authenticated with `key`,
    /// which the setting `setting` holds (named in errors, never the key).
    pub fn new(
        http: reqwest::Client,
        provider: &'static str,
        base: Url,
        key: SecretString,
        setting: &'static str,
    ) -> Self {
        ApiClient { http, provider, base, key, setting, headers: HeaderMap::new() }
    }

    /// The same client, sending `headers` with every request.
    pub fn with_headers(mut self, headers: HeaderMap) -> Self {
        self.headers = headers;
        self
    }

    /// The provider.
    pub fn provider(&self) -> &'static str {
        self.provider
    }

    /// `path` under the API's base URL.
    pub fn url(&self, path: &str) -> Url {
        let mut url = self.base.clone();
        let joined = format!("{}/{}", url.path().trim_end_matches('/'), path.trim_start_matches('/'));
        url.set_path(&joined);
        url
    }

    /// `url` if it is on the API's origin: a next page the API names
    /// elsewhere is refused rather than sent the key.
    pub fn same_origin(&self, url: &str) -> Result<Url, ProviderApiError> {
        match Url::parse(url) {
            Ok(url) if url.origin() == self.base.origin() => Ok(url),
            _ => Err(self.unexpected(UnexpectedAnswer::ForeignNextPage(url.chars().take(100).collect()))),
        }
    }

    /// The error for an answer that is not what the API documents.
    pub fn unexpected(&self, problem: impl Into<UnexpectedAnswer>) -> ProviderApiError {
        ProviderApiError::Unexpected { provider: self.provider, problem: problem.into() }
    }

    /// GETs `url` with the key, retrying 5xx and network errors with
    /// backoff and waiting out 429s; any other non-2xx is final.
    pub async fn get(&self, url: Url) -> Result<Answer, ProviderApiError> {
        self.send(Method::GET, url).await
    }

    /// POSTs to `url` with the key and no body, retried as [`ApiClient::get`]
    /// is: only for requests that may be repeated (a second redelivery of a
    /// webhook is a duplicate the dedup table answers).
    pub async fn post(&self, url: Url) -> Result<Answer, ProviderApiError> {
        self.send(Method::POST, url).await
    }

    async fn send(&self, method: Method, url: Url) -> Result<Answer, ProviderApiError> {
        let mut failures = 0;
        let mut rate_limited = 0;
        loop {
            let sent = self
                .http
                .request(method.clone(), url.clone())
                .header(AUTHORIZATION, format!("Bearer {}", self.key.expose_secret()))
                .headers(self.headers.clone())
                .timeout(REQUEST_TIMEOUT)
                .send()
                .await;
            let (wait, last) = match sent {
                Ok(answer) if answer.status().is_success() => {
                    let headers = answer.headers().clone();
                    match read_up_to(answer, MAX_PAGE_BYTES).await {
                        Ok((body, true)) => return Ok(Answer { body, headers }),
                        Ok((_, false)) => {
                            return Err(ProviderApiError::TooLarge {
                                provider: self.provider,
                                limit: MAX_PAGE_BYTES,
                            });
                        }
                        Err(error) => {
                            failures += 1;
                            (backoff(failures), without_url(error))
                        }
                    }
                }
                Ok(answer) if rate_limited_answer(&answer) => {
                    rate_limited += 1;
                    let last = format!("{} (rate limited)", answer.status());
                    if rate_limited > MAX_RATE_LIMITED {
                        return Err(self.gave_up(rate_limited, last));
                    }
                    let wait = retry_after(answer.headers()).unwrap_or_else(|| backoff(rate_limited));
                    (wait.min(BACKOFF_CAP), last)
                }
                Ok(answer) if answer.status().is_server_error() => {
                    failures += 1;
                    (backoff(failures), answer.status().to_string())
                }
                Ok(answer) => return Err(self.refused(&url, answer).await),
                Err(error) => {
                    failures += 1;
                    (backoff(failures), without_url(error))
                }
            };
            if failures >= MAX_ATTEMPTS {
                return Err(self.gave_up(failures, last));
            }
            tracing::warn!(
                provider = self.provider,
                path = url.path(),
                failure = %last,
                wait_ms = wait.as_millis() as u64,
                "the provider's API failed: trying again"
            );
            tokio::time::sleep(wait).await;
        }
    }

    fn gave_up(&self, attempts: u32, last: String) -> ProviderApiError {
        ProviderApiError::GaveUp { provider: self.provider, attempts, last }
    }

    /// The error for a final non-2xx answer.
    async fn refused(&self, url: &Url, answer: reqwest::Response) -> ProviderApiError {
        let status = answer.status();
        if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
            return ProviderApiError::Unauthorized { provider: self.provider, status, setting: self.setting };
        }
        // Only what is quoted is read: an error's body is no more bounded than a page's.
        let (body, _) = read_up_to(answer, QUOTED_ERROR_BYTES).await.unwrap_or_default();
        let text = String::from_utf8_lossy(&body);
        ProviderApiError::Refused {
            provider: self.provider,
            status,
            path: url.path().to_string(),
            message: crate::operations::display::visible(&text).into_owned(),
        }
    }
}

/// The first `limit` bytes of the answer's body, read as they arrive, and
/// whether that was all of it: nothing past the limit is read.
async fn read_up_to(mut answer: reqwest::Response, limit: usize) -> reqwest::Result<(bytes::Bytes, bool)> {
    let mut body = bytes::BytesMut::new();
    while let Some(chunk) = answer.chunk().await? {
        if body.len() + chunk.len() > limit {
            body.extend_from_slice(&chunk[..limit - body.len()]);
            return Ok((body.freeze(), false));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body.freeze(), true))
}

/// Whether `answer` says to slow down: a 429, or a 403 with `Retry-After`
/// (GitHub's secondary rate limit); a 403 without one refuses the key.
fn rate_limited_answer(answer: &reqwest::Response) -> bool {
    match answer.status() {
        StatusCode::TOO_MANY_REQUESTS => true,
        StatusCode::FORBIDDEN => answer.headers().contains_key(RETRY_AFTER),
        _ => false,
    }
}

/// The wait before attempt `failures + 1`: the base, doubled per failure, capped.
fn backoff(failures: u32) -> Duration {
    BACKOFF_BASE.saturating_mul(1 << failures.saturating_sub(1).min(16)).min(BACKOFF_CAP)
}

/// A 429's `Retry-After`, in seconds (the form the providers send).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds: u64 = headers.get(RETRY_AFTER)?.to_str().ok()?.trim().parse().ok()?;
    Some(Duration::from_secs(seconds))
}

/// A network error's text without its URL (whose query names cursors only,
/// but keep errors short and alike).
fn without_url(error: reqwest::Error) -> String {
    error.without_url().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_base_up_to_the_cap() {
        assert_eq!(backoff(1), Duration::from_millis(500));
        assert_eq!(backoff(2), Duration::from_secs(1));
        assert_eq!(backoff(4), Duration::from_secs(4));
        assert_eq!(backoff(40), BACKOFF_CAP);
    }

    #[test]
    fn retry_after_reads_seconds_and_ignores_anything_else() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert(RETRY_AFTER, "3".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(3)));
        headers.insert(RETRY_AFTER, "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap());
        assert_eq!(retry_after(&headers), None);
    }

    #[test]
    fn urls_join_under_the_base_and_next_pages_stay_on_its_origin() {
        let client = ApiClient::new(
            crate::client::build(),
            "paddle",
            "http://127.0.0.1:9/v2/".parse().unwrap(),
            SecretString::from("pdl_key"),
            "PADDLE_API_KEY",
        );
        assert_eq!(client.url("/events").as_str(), "http://127.0.0.1:9/v2/events");
        assert!(client.same_origin("http://127.0.0.1:9/events?after=evt_1").is_ok());
        assert!(client.same_origin("http://127.0.0.1:10/events").is_err());
        assert!(client.same_origin("https://127.0.0.1:9/events").is_err());
        assert!(!format!("{client:?}").contains("pdl_key"));
    }
}
