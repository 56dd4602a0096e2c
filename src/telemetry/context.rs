//! A trace's context across process boundaries, as W3C Trace Context
//! headers (`traceparent`, `tracestate`): continued from a provider's
//! request, stored with a forwarding job, sent on with each attempt.
//! Without an exporter every function here does nothing: a span has no
//! context to give or take.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The header of a trace's context (and the `destination_jobs` column).
pub const TRACEPARENT: &str = "traceparent";

/// Makes `span` a child of the trace `headers` carry, if they carry one.
pub fn continue_from(span: &Span, headers: &http::HeaderMap) {
    if headers.contains_key(TRACEPARENT) {
        adopt(span, TraceContextPropagator::new().extract(&HeaderExtractor(headers)));
    }
}

/// Makes `span` a child of the trace `traceparent` names (one stored with
/// a job), if any.
pub fn continue_stored(span: &Span, traceparent: Option<&str>) {
    if let Some(traceparent) = traceparent {
        let carrier = HashMap::from([(TRACEPARENT.to_owned(), traceparent.to_owned())]);
        adopt(span, TraceContextPropagator::new().extract(&carrier));
    }
}

/// `span`'s `traceparent`, to store with what goes on later in another
/// task; `None` without an exporter.
pub fn traceparent(span: &Span) -> Option<String> {
    let mut carrier = HashMap::new();
    inject(span, &mut carrier);
    carrier.remove(TRACEPARENT)
}

/// Adds `span`'s context to `headers`, so the receiver's trace joins it.
pub fn send_with(span: &Span, headers: &mut http::HeaderMap) {
    inject(span, &mut HeaderInjector(headers));
}

fn inject(span: &Span, carrier: &mut dyn opentelemetry::propagation::Injector) {
    let context = span.context();
    if context.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(&context, carrier);
    }
}

/// Parents `span` on `context`, if it names a span (a malformed header
/// names none and changes nothing).
fn adopt(span: &Span, context: opentelemetry::Context) {
    if context.span().span_context().is_valid() {
        // Fails only without an exporter's layer, where there is nothing to parent.
        let _ = span.set_parent(context);
    }
}
