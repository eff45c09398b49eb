//! The W3C trace context of an incoming request (`traceparent`, `tracestate`) and whether
//! the request is traced: the request-id middleware makes each traced request's span a
//! child of its caller's. The exporter itself is the process's (the binary installs it).

/// Whether a request whose caller's trace context is `parent` is traced: as its caller
/// decided (the `traceparent`'s sampled flag), else with probability `ratio`.
pub fn sampled(parent: &opentelemetry::Context, ratio: f64) -> bool {
    use opentelemetry::trace::TraceContextExt as _;
    let caller = parent.span().span_context().clone();
    match caller.is_valid() {
        true => caller.is_sampled(),
        false => ratio >= 1.0 || (ratio > 0.0 && rand::random::<f64>() < ratio),
    }
}

/// The W3C trace context of an incoming request (`traceparent`, `tracestate`), as the
/// parent of its span.
pub fn parent_of(headers: &actix_web::http::header::HeaderMap) -> opentelemetry::Context {
    use opentelemetry::propagation::TextMapPropagator as _;
    struct Headers<'a>(&'a actix_web::http::header::HeaderMap);
    impl opentelemetry::propagation::Extractor for Headers<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            self.0.get(key).and_then(|v| v.to_str().ok())
        }
        fn keys(&self) -> Vec<&str> {
            self.0.keys().map(|k| k.as_str()).collect()
        }
    }
    opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&Headers(headers))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_header_becomes_the_parent() {
        use opentelemetry::trace::TraceContextExt as _;
        let mut headers = actix_web::http::header::HeaderMap::new();
        headers.insert(
            actix_web::http::header::HeaderName::from_static("traceparent"),
            actix_web::http::header::HeaderValue::from_static(
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
        );
        let cx = parent_of(&headers);
        let parent = cx.span().span_context().clone();
        assert_eq!(parent.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(parent.span_id().to_string(), "00f067aa0ba902b7");
        assert!(parent.is_sampled() && parent.is_remote());
        let none = parent_of(&actix_web::http::header::HeaderMap::new());
        assert!(!none.span().span_context().is_valid());
        // Sampling: the caller's flag, else the ratio.
        assert!(sampled(&cx, 0.0), "a sampled caller is followed");
        headers.insert(
            actix_web::http::header::HeaderName::from_static("traceparent"),
            actix_web::http::header::HeaderValue::from_static(
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
            ),
        );
        assert!(!sampled(&parent_of(&headers), 1.0), "an unsampled caller is followed");
        assert!(sampled(&none, 1.0) && !sampled(&none, 0.0));
        let kept = (0..10_000).filter(|_| sampled(&none, 0.1)).count();
        assert!((700..1300).contains(&kept), "{kept} of 10,000 at 0.1");
    }
}
