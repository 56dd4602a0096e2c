//! GitHub's record of a hook's deliveries: `GET .../hooks/{id}/deliveries`,
//! newest first, 100 a page, the next page named by the `Link` header; and
//! `POST .../deliveries/{id}/attempts`, which asks GitHub to send one again.
//!
//! GitHub has no event log: a delivery's `guid` is the `X-GitHub-Delivery`
//! header, the event id the inbox dedups on (`providers::github`), the same
//! for every attempt at it, redeliveries included. GitHub keeps deliveries
//! for about 3 days.

use chrono::{DateTime, Utc};
use reqwest::header::{ACCEPT, HeaderMap, HeaderValue, LINK};
use serde::Deserialize;

use super::client::{ApiClient, ProviderApiError};

/// The most deliveries GitHub lists a page.
const PER_PAGE: &str = "100";

/// The REST API version the requests are written against.
const API_VERSION: &str = "2022-11-28";

/// Whose hook it is: GitHub's paths differ. App hooks are not here: their
/// deliveries are read with a JWT signed by the App's private key, which a
/// token cannot stand in for (README "Missed events").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookScope {
    /// A repository's hook: `owner/name`.
    Repo(String),
    /// An organization's hook.
    Org(String),
}

impl HookScope {
    /// The scope if `repo` or `org` (exactly one) names it well: their
    /// text goes into the request's path, so only GitHub's name characters.
    pub fn parse(repo: Option<&str>, org: Option<&str>) -> Option<HookScope> {
        let name = |part: &str| {
            !part.is_empty()
                && part != "."
                && part != ".."
                && part.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        match (repo, org) {
            (Some(repo), None) => match repo.split_once('/') {
                Some((owner, name_part)) if name(owner) && name(name_part) => {
                    Some(HookScope::Repo(repo.into()))
                }
                _ => None,
            },
            (None, Some(org)) if name(org) => Some(HookScope::Org(org.into())),
            _ => None,
        }
    }

    /// The hook's path: `/repos/{owner}/{repo}/hooks/{id}` or `/orgs/{org}/hooks/{id}`.
    fn hook_path(&self, hook_id: u64) -> String {
        match self {
            HookScope::Repo(repo) => format!("/repos/{repo}/hooks/{hook_id}"),
            HookScope::Org(org) => format!("/orgs/{org}/hooks/{hook_id}"),
        }
    }
}

/// One attempt at delivering an event, as GitHub lists it.
#[derive(Debug, Clone, Deserialize)]
pub struct DeliveryAttempt {
    /// The attempt's id: what a redelivery request names.
    pub id: u64,
    /// The delivery's `X-GitHub-Delivery`: the event id in the dedup table.
    pub guid: String,
    /// When GitHub sent it.
    pub delivered_at: DateTime<Utc>,
}

/// One page of a hook's delivery attempts, newest first.
#[derive(Debug)]
pub struct AttemptsPage {
    /// The attempts.
    pub attempts: Vec<DeliveryAttempt>,
    /// The next page's URL, from the `Link` header.
    pub next: Option<String>,
}

/// A repository's or organization's hook, read and redelivered with a token.
#[derive(Debug)]
pub struct GitHubHook {
    api: ApiClient,
    path: String,
}

impl GitHubHook {
    /// The hook `hook_id` of `scope`, behind `api`.
    pub fn new(api: ApiClient, scope: &HookScope, hook_id: u64) -> Self {
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, HeaderValue::from_static("application/vnd.github+json"));
        headers.insert("x-github-api-version", HeaderValue::from_static(API_VERSION));
        GitHubHook { api: api.with_headers(headers), path: scope.hook_path(hook_id) }
    }

    /// The provider's name (the `provider` column).
    pub fn provider(&self) -> &'static str {
        self.api.provider()
    }

    /// The first page of attempts, or the page `next` names.
    pub async fn attempts(&self, next: Option<&str>) -> Result<AttemptsPage, ProviderApiError> {
        let url = match next {
            Some(next) => self.api.same_origin(next)?,
            None => {
                let mut url = self.api.url(&format!("{}/deliveries", self.path));
                url.query_pairs_mut().append_pair("per_page", PER_PAGE);
                url
            }
        };
        let answer = self.api.get(url).await?;
        let attempts = serde_json::from_slice(&answer.body).map_err(|e| self.api.unexpected(e))?;
        let next = answer.headers.get(LINK).and_then(|link| link.to_str().ok()).and_then(next_link);
        Ok(AttemptsPage { attempts, next: next.map(str::to_owned) })
    }

    /// Asks GitHub to send attempt `id`'s delivery again (202 Accepted):
    /// it arrives later as a signed webhook, through the normal route.
    pub async fn redeliver(&self, id: u64) -> Result<(), ProviderApiError> {
        let url = self.api.url(&format!("{}/deliveries/{id}/attempts", self.path));
        self.api.post(url).await.map(drop)
    }
}

/// The URL of a `Link` header's `rel="next"`, if it has one
/// (`<https://...&cursor=...>; rel="next", <...>; rel="prev"`).
fn next_link(header: &str) -> Option<&str> {
    header.split(',').find_map(|link| {
        let (url, params) = link.trim().strip_prefix('<')?.split_once('>')?;
        let next = params.split(';').any(|param| {
            let param = param.trim();
            param
                .strip_prefix("rel=")
                .is_some_and(|rel| rel.trim_matches('"').split(' ').any(|r| r == "next"))
        });
        next.then_some(url)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_link_is_read_among_the_others() {
        let header = r#"<https://api.github.com/repos/o/r/hooks/1/deliveries?per_page=2&cursor=v1_7>; rel="next", <https://api.github.com/repos/o/r/hooks/1/deliveries?per_page=2>; rel="first""#;
        assert_eq!(
            next_link(header),
            Some("https://api.github.com/repos/o/r/hooks/1/deliveries?per_page=2&cursor=v1_7")
        );
        assert_eq!(next_link(r#"<https://x/p?cursor=1>; rel="prev""#), None);
        assert_eq!(next_link(""), None);
        assert_eq!(next_link("garbage"), None);
    }

    #[test]
    fn a_hook_scope_is_a_repository_or_an_organization_with_names_only() {
        assert_eq!(
            HookScope::parse(Some("octo/inbox.rs"), None),
            Some(HookScope::Repo("octo/inbox.rs".into()))
        );
        assert_eq!(HookScope::parse(None, Some("octo-org")), Some(HookScope::Org("octo-org".into())));
        for (repo, org) in [
            (Some("octo"), None),
            (Some("octo/../x"), None),
            (Some("octo/a/b"), None),
            (Some("octo/.."), None),
            (None, Some("a/b")),
            (None, Some("a?b")),
            (Some("o/r"), Some("o")),
            (None, None),
        ] {
            assert_eq!(HookScope::parse(repo, org), None, "{repo:?} {org:?}");
        }
        assert_eq!(HookScope::Repo("o/r".into()).hook_path(42), "/repos/o/r/hooks/42");
        assert_eq!(HookScope::Org("o".into()).hook_path(7), "/orgs/o/hooks/7");
    }
}
