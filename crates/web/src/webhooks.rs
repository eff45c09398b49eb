//! The Webhooks pages (docs/webhooks.md): the workspace's endpoints and a form to create
//! one, an endpoint with its settings, actions and deliveries, a delivery with every
//! attempt and the receiver's answers, and a signing secret shown once.

use crate::Layout;
use askama::Template;

/// An endpoint as the pages show it.
#[derive(Debug, Clone)]
pub struct WebhookRow {
    pub id: String,
    pub url: String,
    pub description: String,
    pub enabled: bool,
    /// The event types, comma-separated.
    pub events: String,
    /// `creditsLow` percents, comma-separated.
    pub credits_low: String,
    /// `expiringDays`, comma-separated.
    pub expiring_days: String,
    pub created: String,
}

/// An event type and whether the endpoint (or the new one) takes it.
#[derive(Debug, Clone)]
pub struct EventChoice {
    pub name: &'static str,
    pub checked: bool,
}

/// The workspace's endpoints (a page at a time), and a form to create one.
#[derive(Debug, Template)]
#[template(path = "webhooks.html")]
pub struct WebhooksPage {
    pub layout: Layout,
    pub csrf: String,
    pub endpoints: Vec<WebhookRow>,
    pub next: Option<String>,
    /// Every event type, none ticked.
    pub choices: Vec<EventChoice>,
}

/// A delivery as a list shows it.
#[derive(Debug, Clone)]
pub struct DeliveryRow {
    pub id: String,
    pub event_type: String,
    pub event_id: String,
    pub status: &'static str,
    pub attempts: i64,
    /// The receiver's last HTTP status, or `—`.
    pub last_status: String,
    /// When the next attempt is due, or `—`.
    pub next_attempt: String,
    pub created: String,
}

/// An endpoint: its settings in a form, its actions, and its deliveries (filtered by status).
#[derive(Debug, Template)]
#[template(path = "webhook.html")]
pub struct WebhookPage {
    pub layout: Layout,
    pub csrf: String,
    pub endpoint: WebhookRow,
    /// Every event type, those the endpoint takes ticked.
    pub choices: Vec<EventChoice>,
    /// The status filter: `(value, label, current)`.
    pub statuses: Vec<(&'static str, &'static str, bool)>,
    pub deliveries: Vec<DeliveryRow>,
    pub next: Option<String>,
}

/// One attempt of a delivery.
#[derive(Debug, Clone)]
pub struct AttemptRow {
    pub attempt: i64,
    pub at: String,
    /// The receiver's HTTP status, or `—` when there was no answer.
    pub status: String,
    pub error: String,
    /// The start of the receiver's answer, as text.
    pub response: String,
    pub duration_ms: i64,
}

/// A delivery, each attempt with the receiver's answer, and the replay button.
#[derive(Debug, Template)]
#[template(path = "delivery.html")]
pub struct DeliveryPage {
    pub layout: Layout,
    pub csrf: String,
    pub endpoint_id: String,
    pub delivery: DeliveryRow,
    pub attempts: Vec<AttemptRow>,
}

/// An endpoint's signing secret (new, or rotated), shown this once.
#[derive(Debug, Template)]
#[template(path = "webhook_secret.html")]
pub struct WebhookSecretPage {
    pub layout: Layout,
    pub endpoint_id: String,
    pub secret: String,
    /// Whether the secret replaced another (which keeps signing beside it for a day).
    pub rotated: bool,
}
