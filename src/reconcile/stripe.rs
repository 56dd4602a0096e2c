//! Stripe's event log: `GET /v1/events?created[gte]=...`, newest first,
//! 100 a page, the next page `starting_after` the last event read. Stripe
//! keeps events for 30 days; each answer's `Request-Id` header is recorded.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::client::{ApiClient, ProviderApiError};
use super::log::{EventLog, Order, Page, Start};

/// The most events Stripe returns a page.
const LIMIT: &str = "100";

/// Stripe's `/v1/events`.
#[derive(Debug)]
pub struct StripeLog {
    api: ApiClient,
}

impl StripeLog {
    /// The log behind `api`.
    pub fn new(api: ApiClient) -> Self {
        StripeLog { api }
    }
}

/// A page as Stripe answers it.
#[derive(Deserialize)]
struct List {
    data: Vec<Box<RawValue>>,
    has_more: bool,
}

/// An event's id, to page after it.
#[derive(Deserialize)]
struct Id {
    id: String,
}

impl EventLog for StripeLog {
    fn provider(&self) -> &'static str {
        self.api.provider()
    }

    fn order(&self) -> Order {
        Order::NewestFirst
    }

    async fn read(&self, start: &Start, next: Option<&str>) -> Result<Page, ProviderApiError> {
        let mut url = self.api.url("/v1/events");
        url.query_pairs_mut()
            .append_pair("limit", LIMIT)
            .append_pair("created[gte]", &start.since.timestamp().to_string());
        if let Some(after) = next {
            url.query_pairs_mut().append_pair("starting_after", after);
        }
        let answer = self.api.get(url).await?;
        let list: List = serde_json::from_slice(&answer.body).map_err(|e| self.api.unexpected(e))?;
        let next = match (list.has_more, list.data.last()) {
            (true, Some(last)) => {
                Some(serde_json::from_str::<Id>(last.get()).map_err(|e| self.api.unexpected(e))?.id)
            }
            _ => None,
        };
        let request_id = answer.headers.get("request-id").and_then(|id| id.to_str().ok()).map(str::to_owned);
        Ok(Page { events: list.data, request_id, next })
    }
}
