//! An OTLP/HTTP collector on loopback: it decodes each protobuf
//! `ExportTraceServiceRequest` POSTed to `/v1/traces` with the published
//! `opentelemetry-proto` types and keeps its spans.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value;
use prost::Message;

/// One span received, ids in lowercase hex as `traceparent` writes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedSpan {
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    /// The `service.name` of its resource.
    pub service: String,
}

/// A running collector; it stops with the test's runtime.
pub struct Collector {
    addr: SocketAddr,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
}

impl Collector {
    /// Listens on a free loopback port.
    pub async fn start() -> Collector {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let app = Router::new().route("/v1/traces", post(export)).with_state(spans.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Collector { addr, spans }
    }

    /// The base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT` names it.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().unwrap().clone()
    }
}

async fn export(State(spans): State<Arc<Mutex<Vec<ReceivedSpan>>>>, body: Bytes) -> impl IntoResponse {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, Vec::new()).into_response();
    };
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .iter()
            .flat_map(|resource| &resource.attributes)
            .find(|attribute| attribute.key == "service.name")
            .and_then(|attribute| match attribute.value.as_ref()?.value.as_ref()? {
                any_value::Value::StringValue(name) => Some(name.clone()),
                _ => None,
            })
            .unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            spans.lock().unwrap().extend(scope_spans.spans.into_iter().map(|span| ReceivedSpan {
                name: span.name,
                trace_id: hex::encode(span.trace_id),
                span_id: hex::encode(span.span_id),
                parent_span_id: hex::encode(span.parent_span_id),
                service: service.clone(),
            }));
        }
    }
    let answer = ExportTraceServiceResponse::default().encode_to_vec();
    ([(header::CONTENT_TYPE, "application/x-protobuf")], answer).into_response()
}
