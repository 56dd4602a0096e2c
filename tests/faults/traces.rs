//! Traces over OTLP from the real binary to a collector on loopback
//! (`support::otlp`): one delivery forwarded to two destinations is one
//! trace, the provider's request at its root (or under the provider's own
//! `traceparent`), with its verification, its transaction and each
//! forwarding attempt; and each destination receives that trace in the
//! `traceparent` of its request, naming the attempt's span. The service is
//! stopped with SIGTERM before the spans are read: what it still held in its
//! batch is sent at shutdown.

use std::time::Duration;

use serde_json::json;

use crate::support::forwarding::{DeclarationFile, SECRET, env_refs};
use crate::support::otlp::{Collector, ReceivedSpan};
use crate::support::receiver::Receiver;
use crate::support::service::database_url;
use crate::support::socket::post;
use crate::support::*;

/// A provider's own trace, as its `traceparent` names it.
const PROVIDER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PROVIDER_SPAN: &str = "00f067aa0ba902b7";

/// What one run saw: the collector's spans and the destinations' `traceparent`s.
struct Traced {
    spans: Vec<ReceivedSpan>,
    traceparents: Vec<String>,
}

impl Traced {
    /// The one span named `name`.
    fn span(&self, name: &str) -> &ReceivedSpan {
        let mut named = self.spans.iter().filter(|span| span.name == name);
        let span = named.next().unwrap_or_else(|| panic!("no {name} span in {:#?}", self.spans));
        assert!(named.next().is_none(), "more than one {name} span in {:#?}", self.spans);
        span
    }
}

/// Delivers one Paddle event (with `traceparent`, if given) to a service
/// exporting traces to a collector, whose two destinations receive it;
/// then stops the service.
async fn deliver_traced(traceparent: Option<&str>) -> Traced {
    let db = TestDatabase::create().await;
    let url = database_url(&db.connect_options());
    let collector = Collector::start().await;
    let receiver = Receiver::start(SECRET).await;
    let declaration = DeclarationFile::write(&receiver, "10s");
    let endpoint = collector.endpoint();
    let mut env = declaration.env();
    env.extend([
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".to_string()),
        ("OTEL_SERVICE_NAME", "inbox-under-test".to_string()),
    ]);
    let mut service = Service::start(&url, &env_refs(&env)).await;

    let mut delivery = paddle(&json!({
        "event_id": "evt_traced",
        "event_type": "customer.updated",
        "occurred_at": "2024-04-12T10:18:49.621022Z",
        "data": { "id": "ctm_traced" }
    }));
    if let Some(traceparent) = traceparent {
        delivery = delivery.header("traceparent", traceparent);
    }
    let (status, body) = post(service.addr, &delivery).await;
    assert_eq!(status, 200, "{body}");
    let arrivals = receiver.until_arrivals(2).await;
    service.terminate();
    let exited = service.exited_within(Duration::from_secs(30)).await;
    assert!(exited.is_some_and(|status| status.success()), "{exited:?}\n{}", service.logs().join("\n"));
    Traced {
        spans: collector.spans(),
        traceparents: arrivals.iter().map(|arrival| arrival.header("traceparent").to_string()).collect(),
    }
}

/// `traceparent`'s trace id and span id.
fn ids(traceparent: &str) -> (&str, &str) {
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert!(parts.len() == 4 && parts[0] == "00", "a W3C traceparent: {traceparent:?}");
    (parts[1], parts[2])
}

/// Checks that the delivery and its two attempts are one trace, the
/// request span's parent being `parent`, and returns the trace id.
fn check_one_trace(traced: &Traced, parent: &str) -> String {
    let request = traced.span("request");
    assert_eq!(request.parent_span_id, parent, "the request span's parent");
    assert_eq!(request.service, "inbox-under-test", "OTEL_SERVICE_NAME");
    for child in ["verify", "transaction"] {
        let child = traced.span(child);
        assert_eq!((&child.trace_id, &child.parent_span_id), (&request.trace_id, &request.span_id));
    }
    let attempts: Vec<&ReceivedSpan> = traced.spans.iter().filter(|span| span.name == "forward").collect();
    assert_eq!(attempts.len(), 2, "{:#?}", traced.spans);
    for attempt in &attempts {
        assert_eq!((&attempt.trace_id, &attempt.parent_span_id), (&request.trace_id, &request.span_id));
    }
    // Each destination saw the trace, and the span of the attempt that reached it.
    assert_eq!(traced.traceparents.len(), 2);
    for traceparent in &traced.traceparents {
        let (trace_id, span_id) = ids(traceparent);
        assert_eq!(trace_id, request.trace_id, "the destination's traceparent {traceparent}");
        assert!(attempts.iter().any(|attempt| attempt.span_id == span_id), "{traceparent} names an attempt");
    }
    request.trace_id.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_delivery_is_one_trace_that_the_destination_receives() {
    let traced = deliver_traced(None).await;
    let trace_id = check_one_trace(&traced, "");
    assert_ne!(trace_id, "0".repeat(32));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_providers_traceparent_is_continued_through_to_the_destination() {
    let traced = deliver_traced(Some(&format!("00-{PROVIDER_TRACE}-{PROVIDER_SPAN}-01"))).await;
    assert_eq!(check_one_trace(&traced, PROVIDER_SPAN), PROVIDER_TRACE);
}
