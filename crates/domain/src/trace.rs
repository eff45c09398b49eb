//! Trace spans, only where a program traces.
//!
//! keygate's crates make their spans with `tracing`; the server installs a subscriber (the
//! OpenTelemetry exporter) only when tracing is configured. Without one, a span would still
//! cost something here: `tracing`'s `log` feature (which the HTTP stack turns on) hands
//! every disabled span's creation, entry and exit to the `log` logger's filter, several
//! filter checks per request. So each span site asks first, at the price of one atomic
//! load, whether a process-wide subscriber was ever set.

/// `make()`'s span when a global `tracing` subscriber is set, else a disabled span that
/// costs nothing to enter, record into or drop.
#[inline]
pub fn span_when_traced(make: impl FnOnce() -> tracing::Span) -> tracing::Span {
    if tracing::dispatcher::has_been_set() { make() } else { tracing::Span::none() }
}
