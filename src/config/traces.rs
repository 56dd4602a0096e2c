//! Traces exported over OTLP, named by the OpenTelemetry SDKs' own
//! environment variables, so that a deployment's usual settings apply.

use clap::{Args, ValueEnum};

/// Where and how `serve` exports its spans. No endpoint: no exporter.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Traces (OpenTelemetry)")]
pub struct TracesConfig {
    /// OTLP collector to export spans to, over HTTP: they are POSTed to `<endpoint>/v1/traces`. Unset or empty: no spans are exported, at no cost.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,

    /// The full URL spans are POSTed to, in place of `<OTEL_EXPORTER_OTLP_ENDPOINT>/v1/traces`.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")]
    pub otlp_traces_endpoint: Option<String>,

    /// The OTLP protocol: only `http/protobuf` is supported (not `grpc`, nor `http/json`).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_PROTOCOL", value_enum, default_value = "http/protobuf")]
    pub otlp_protocol: OtlpProtocol,

    /// The `service.name` the spans are exported under.
    #[arg(long, env = "OTEL_SERVICE_NAME", default_value = "webhook-inbox")]
    pub otel_service_name: String,
}

impl TracesConfig {
    /// The URL spans are POSTed to, if any: the traces endpoint as given,
    /// else the endpoint with `/v1/traces` appended (the convention).
    pub fn traces_url(&self) -> Option<String> {
        let set = |value: &Option<String>| value.clone().filter(|value| !value.trim().is_empty());
        set(&self.otlp_traces_endpoint).or_else(|| {
            set(&self.otlp_endpoint).map(|base| format!("{}/v1/traces", base.trim_end_matches('/')))
        })
    }
}

/// The OTLP protocols the exporter speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OtlpProtocol {
    /// Protobuf over HTTP.
    #[value(name = "http/protobuf")]
    HttpProtobuf,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(endpoint: Option<&str>, traces_endpoint: Option<&str>) -> TracesConfig {
        TracesConfig {
            otlp_endpoint: endpoint.map(str::to_owned),
            otlp_traces_endpoint: traces_endpoint.map(str::to_owned),
            otlp_protocol: OtlpProtocol::HttpProtobuf,
            otel_service_name: "webhook-inbox".to_owned(),
        }
    }

    #[test]
    fn the_traces_url_follows_the_opentelemetry_convention() {
        assert_eq!(config(None, None).traces_url(), None);
        assert_eq!(config(Some(""), None).traces_url(), None);
        assert_eq!(
            config(Some("http://collector:4318/"), None).traces_url().as_deref(),
            Some("http://collector:4318/v1/traces")
        );
        assert_eq!(
            config(Some("http://collector:4318"), Some("http://other:4318/custom")).traces_url().as_deref(),
            Some("http://other:4318/custom")
        );
    }
}
