//! OpenTelemetry trace export (cargo feature `otel`): the worker's tracing spans (among them the
//! `activity` span with `run_id`, `turn`, `call_id`) go to `<otel_endpoint>/v1/traces` over
//! OTLP/HTTP (protobuf), batched on a background thread. Metrics go to `/v1/metrics` (see
//! [`crate::metrics`]).

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_sdk::{Resource, trace::SdkTracerProvider};
use tracing::Subscriber;
use tracing_subscriber::{Layer, registry::LookupSpan};

/// Service name of the exported spans.
const SERVICE: &str = "baton-worker";

/// The OTLP URL of one signal (`traces`, `metrics`) under the collector's base URL.
pub(crate) fn signal_url(endpoint: &str, signal: &str) -> String {
    format!("{}/v1/{signal}", endpoint.trim_end_matches('/'))
}

/// Flushes buffered spans when the worker exits.
pub(crate) struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// Exports what is still buffered and stops the exporter.
    pub(crate) fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            eprintln!("baton-worker: cannot flush traces: {e}");
        }
    }
}

/// A tracing layer exporting spans to the collector at `endpoint`.
pub(crate) fn layer<S>(endpoint: &str) -> anyhow::Result<(impl Layer<S> + use<S>, Traces)>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let exporter = SpanExporter::builder()
        .with_http()
        .with_endpoint(signal_url(endpoint, "traces"))
        .build()
        .map_err(|e| anyhow::anyhow!("cannot export traces to {endpoint}: {e}"))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name(SERVICE).build())
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer(SERVICE));
    Ok((layer, Traces { provider }))
}
