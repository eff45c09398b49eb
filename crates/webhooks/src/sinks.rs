//! Sinks: destinations the operator configures (the usage export's billing systems,
//! `keygate-metering`), not a workspace's endpoints. A delivery to a sink goes through the
//! outbox like any other (written in the transaction that decides it, claimed with a
//! lease, retried after [`crate::RETRY_DELAYS_MS`], logged per attempt), but is not
//! signed: it carries the sink's own headers (a bearer token) and content type, and may
//! reach any address (the operator chose it, as it chose the database's).

use keygate_domain::{Secret, redact_url};

/// What a sink's id starts with, in `webhook_deliveries.endpoint_id`: no endpoint id
/// (`whep_…`) does.
pub const SINK_PREFIX: &str = "sink:";

/// A configured destination.
#[derive(Clone)]
pub struct Sink {
    /// [`SINK_PREFIX`] and the sink's name.
    pub id: String,
    pub url: String,
    /// The body's media type.
    pub content_type: &'static str,
    /// Sent with every request; values are secrets (never logged).
    pub headers: Vec<(&'static str, Secret)>,
}

impl Sink {
    /// The sink `name` (its id is [`SINK_PREFIX`] + `name`).
    pub fn new(name: &str, url: impl Into<String>, content_type: &'static str) -> Self {
        Self { id: format!("{SINK_PREFIX}{name}"), url: url.into(), content_type, headers: Vec::new() }
    }

    /// With `header: value` on every request.
    pub fn with_header(mut self, header: &'static str, value: Secret) -> Self {
        self.headers.push((header, value));
        self
    }
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<&str> = self.headers.iter().map(|(h, _)| *h).collect();
        f.debug_struct("Sink")
            .field("id", &self.id)
            .field("url", &redact_url(&self.url))
            .field("content_type", &self.content_type)
            .field("headers", &headers)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sinks_debug_shows_no_secret() {
        let sink = Sink::new("stripe", "https://user:pw@api.example/v1", "text/plain")
            .with_header("authorization", Secret::new("Bearer sk_live_hidden"));
        let shown = format!("{sink:?}");
        assert!(shown.contains("sink:stripe") && shown.contains("authorization"), "{shown}");
        assert!(!shown.contains("sk_live_hidden") && !shown.contains("pw@"), "{shown}");
    }
}
