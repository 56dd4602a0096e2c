//! Paddle's event log: `GET /events`, oldest first (`order_by=id[ASC]`),
//! 200 a page, each page naming the next (`meta.pagination.next`).
//! Paddle keeps events for 90 days and has no time filter: a run without a
//! cursor reads from the oldest and leaves those before `--since` alone.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::client::{ApiClient, ProviderApiError};
use super::log::{EventLog, Order, Page, Start};

/// The most events Paddle returns a page.
const PER_PAGE: &str = "200";

/// Paddle's `/events`.
#[derive(Debug)]
pub struct PaddleLog {
    api: ApiClient,
}

impl PaddleLog {
    /// The log behind `api`.
    pub fn new(api: ApiClient) -> Self {
        PaddleLog { api }
    }
}

/// A page as Paddle answers it.
#[derive(Deserialize)]
struct List {
    data: Vec<Box<RawValue>>,
    meta: Meta,
}

#[derive(Deserialize)]
struct Meta {
    request_id: Option<String>,
    pagination: Pagination,
}

#[derive(Deserialize)]
struct Pagination {
    next: Option<String>,
    has_more: bool,
}

impl EventLog for PaddleLog {
    fn provider(&self) -> &'static str {
        self.api.provider()
    }

    fn order(&self) -> Order {
        Order::OldestFirst
    }

    async fn read(&self, start: &Start, next: Option<&str>) -> Result<Page, ProviderApiError> {
        let url = match next {
            Some(next) => self.api.same_origin(next)?,
            None => {
                let mut url = self.api.url("/events");
                url.query_pairs_mut().append_pair("order_by", "id[ASC]").append_pair("per_page", PER_PAGE);
                if let Some(after) = &start.after {
                    url.query_pairs_mut().append_pair("after", after);
                }
                url
            }
        };
        let answer = self.api.get(url).await?;
        let list: List = serde_json::from_slice(&answer.body).map_err(|e| self.api.unexpected(e))?;
        Ok(Page {
            events: list.data,
            request_id: list.meta.request_id,
            next: list.meta.pagination.next.filter(|_| list.meta.pagination.has_more),
        })
    }
}
