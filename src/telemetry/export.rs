//! The OTLP exporter: spans batched on the SDK's own thread and POSTed as
//! protobuf over HTTP, by a blocking client on the service's TLS setup.

use anyhow::Context;
use opentelemetry::trace::TracerProvider;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

use crate::client;
use crate::config::{OtlpProtocol, TracesConfig};

/// The exporting tracer provider, if traces are on; [`Traces::shutdown`]
/// sends the spans still batched.
pub struct Traces(Option<SdkTracerProvider>);

impl Traces {
    /// Starts exporting to `config`'s endpoint, if it names one.
    pub(super) fn start(config: Option<&TracesConfig>) -> anyhow::Result<Traces> {
        let Some((config, url)) = config.and_then(|config| Some((config, config.traces_url()?))) else {
            return Ok(Traces(None));
        };
        let OtlpProtocol::HttpProtobuf = config.otlp_protocol;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(url.as_str())
            .with_http_client(client::build_blocking())
            .build()
            .with_context(|| format!("cannot export traces to {url}"))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(Resource::builder().with_service_name(config.otel_service_name.clone()).build())
            .build();
        Ok(Traces(Some(provider)))
    }

    /// The tracer spans are exported by, if traces are on.
    pub(super) fn tracer(&self) -> Option<SdkTracer> {
        self.0.as_ref().map(|provider| provider.tracer(env!("CARGO_PKG_NAME")))
    }

    /// Exports the spans still batched, then stops the exporter.
    pub async fn shutdown(self) {
        let Some(provider) = self.0 else { return };
        // The SDK waits for its exporting thread: not on a runtime's worker.
        match tokio::task::spawn_blocking(move || provider.shutdown()).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "could not export the last spans"),
            Err(error) => tracing::warn!(%error, "could not export the last spans"),
        }
    }
}
