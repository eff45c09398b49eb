//! Trace spans, only where a program traces.
//!
//! keygate's crates make their spans with `tracing`; the server installs a subscriber (the
//! OpenTelemetry exporter) only when tracing is configured, and then traces only the
//! requests it samples. Without a subscriber, a span would still cost something here:
//! `tracing`'s `log` feature (which the HTTP stack turns on) hands every disabled span's
//! creation, entry and exit to the `log` logger's filter, several filter checks per
//! request. So each span site asks first, at the price of one atomic load, whether a
//! process-wide subscriber was ever set; and a span below the request is made only under a
//! traced (sampled) request, so that an unsampled request costs no span at all and
//! background work (polls, flushes) makes no trace of its own.

use tracing::Span;

/// Whether a process-wide `tracing` subscriber was ever set.
#[inline]
pub fn traced() -> bool {
    tracing::dispatcher::has_been_set()
}

/// The current span when the program traces, else a disabled one.
#[inline]
pub fn current_span() -> Span {
    if traced() { Span::current() } else { Span::none() }
}

/// `make()`'s span, a child of the current span, when the program traces and the current
/// span is traced (a sampled request's); else a disabled span that costs nothing to enter,
/// record into or drop.
#[inline]
pub fn child_span(make: impl FnOnce() -> Span) -> Span {
    if traced() && !Span::current().is_disabled() { make() } else { Span::none() }
}
