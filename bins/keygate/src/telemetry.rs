//! OpenTelemetry traces (docs/operations.md, "Observability"), off unless an OTLP endpoint
//! is set: then every HTTP request is a span (its route, status, request id and caller's
//! workspace; never a key, a token or a body), with children for the verification cache,
//! the blocking pool's wait, the database and Redis, exported over OTLP (HTTP/protobuf to
//! `<endpoint>/v1/traces`, or gRPC) by a background thread in batches.
//!
//! The libraries make their spans with `tracing` and know nothing of OpenTelemetry; this
//! module bridges them (`tracing-opentelemetry`). Off, no subscriber is installed and each
//! span site costs one relaxed load. On, the subscriber is the process's (set once, at
//! start, by the binary: [`Tracing::install`]); spans whose target is not keygate's are
//! not exported.

use anyhow::Context as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use std::time::Duration;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;

/// How spans travel to the collector (`KEYGATE_OTLP_PROTOCOL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// `http/protobuf`: `POST <endpoint>/v1/traces` (the collector's port 4318).
    HttpProtobuf,
    /// `grpc`: the collector's `TraceService/Export` at `<endpoint>` (port 4317).
    Grpc,
}

impl OtlpProtocol {
    /// `http/protobuf` or `grpc` (the values the OpenTelemetry SDKs' own setting takes).
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "http/protobuf" | "http" => Ok(Self::HttpProtobuf),
            "grpc" => Ok(Self::Grpc),
            _ => Err("http/protobuf or grpc".into()),
        }
    }
}

/// Where and how much to trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSettings {
    /// The collector's base URL (`http://collector:4318`); spans go to `<it>/v1/traces`
    /// over HTTP.
    pub endpoint: String,
    pub protocol: OtlpProtocol,
    /// The share of requests without a trace context that are traced, 0 to 1; a request
    /// whose `traceparent` says sampled (or not) follows its caller's decision.
    pub sample_ratio: f64,
}

/// A sample ratio: a number from 0 to 1.
pub fn sample_ratio(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err("a number from 0 to 1".into()),
    }
}

/// Whose spans are exported: keygate's crates' (the exporter's own HTTP client and
/// others' libraries make spans too, which would otherwise trace the exporter itself).
fn is_keygates(target: &str) -> bool {
    target.starts_with("keygate")
}

/// The installed tracing: exports what is left when dropped.
#[derive(Debug)]
pub struct Tracing {
    provider: SdkTracerProvider,
    /// gRPC's client runs on a runtime of its own (one thread), kept as long as it exports.
    _runtime: Option<tokio::runtime::Runtime>,
}

impl Tracing {
    /// Makes `settings`' exporter and sets the process's `tracing` subscriber to it. Once
    /// per process (a second call fails): the binary calls it before the server starts.
    pub fn install(settings: &TraceSettings) -> anyhow::Result<Self> {
        let base = settings.endpoint.trim_end_matches('/');
        let timeout = Duration::from_secs(5);
        let (exporter, runtime) = match settings.protocol {
            OtlpProtocol::HttpProtobuf => {
                let exporter = opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                    .with_endpoint(format!("{base}/v1/traces"))
                    .with_timeout(timeout)
                    .build()
                    .context("the OTLP/HTTP exporter")?;
                (exporter, None)
            }
            OtlpProtocol::Grpc => {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name("keygate-otlp")
                    .enable_all()
                    .build()
                    .context("the OTLP/gRPC exporter's runtime")?;
                let exporter = runtime
                    .block_on(async {
                        opentelemetry_otlp::SpanExporter::builder()
                            .with_tonic()
                            .with_endpoint(base)
                            .with_timeout(timeout)
                            .build()
                    })
                    .context("the OTLP/gRPC exporter")?;
                (exporter, Some(runtime))
            }
        };
        // Sampled before any span is made ([`sampled`], in the request's middleware): an
        // unsampled request then costs no span at all. What reaches the SDK is kept.
        let sampler = Sampler::ParentBased(Box::new(Sampler::AlwaysOn));
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name("keygate")
            .with_attribute(opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_sampler(sampler)
            .with_resource(resource)
            .build();
        let layer = tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("keygate"))
            .with_threads(false)
            .with_location(false)
            .with_filter(tracing_subscriber::filter::filter_fn(|m| is_keygates(m.target())));
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
            .context("a tracing subscriber was already set")?;
        log::info!(
            "tracing: OTLP {} to {base}, sampling {}",
            match settings.protocol {
                OtlpProtocol::HttpProtobuf => "http/protobuf",
                OtlpProtocol::Grpc => "grpc",
            },
            settings.sample_ratio
        );
        Ok(Self { provider, _runtime: runtime })
    }
}

impl Drop for Tracing {
    fn drop(&mut self) {
        if let Err(e) = self.provider.shutdown() {
            log::warn!("tracing: the last spans could not be exported: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_and_refuse_what_they_should() {
        assert_eq!(OtlpProtocol::parse("grpc"), Ok(OtlpProtocol::Grpc));
        assert_eq!(OtlpProtocol::parse("http/protobuf"), Ok(OtlpProtocol::HttpProtobuf));
        assert!(OtlpProtocol::parse("http/json").is_err());
        assert_eq!(sample_ratio("0.25"), Ok(0.25));
        for bad in ["-0.1", "1.5", "NaN", "x", ""] {
            assert!(sample_ratio(bad).is_err(), "{bad}");
        }
        assert!(is_keygates("keygate_store::redis") && is_keygates("keygate::http"));
        assert!(!is_keygates("h2::proto") && !is_keygates("hyper"));
    }
}
