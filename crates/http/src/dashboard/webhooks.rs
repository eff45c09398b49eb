//! `/dashboard/webhooks` and `/dashboard/deliveries`: the workspace's webhook endpoints
//! (docs/webhooks.md), created (the secret shown once), edited, disabled, rotated and
//! deleted, their deliveries with each attempt's answer, and replay, through the same
//! service as `webhooks.*` (so with its rules: the `webhook.*` permissions, the URL checks).

use super::answer::{DashError, html, see_other};
use super::forms::{encode, field, token_ok, when};
use super::session::Signed;
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use keygate_domain::Patch;
use keygate_web::{
    AttemptRow, DeliveryPage, DeliveryRow, EventChoice, WebhookPage, WebhookRow, WebhookSecretPage,
    WebhooksPage,
};
use keygate_webhooks::{Attempt, Delivery, EVENT_TYPES, Endpoint, EndpointChange, NewEndpoint, Thresholds};
use serde::Deserialize;
use std::collections::HashMap;

const PAGE: usize = 50;

fn joined<T: ToString>(values: &[T]) -> String {
    values.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

fn row(e: &Endpoint) -> WebhookRow {
    WebhookRow {
        id: e.id.clone(),
        url: e.url.clone(),
        description: e.description.clone().unwrap_or_default(),
        enabled: e.enabled,
        events: e.events.join(", "),
        credits_low: joined(&e.credits_low),
        expiring_days: joined(&e.expiring_days),
        created: when(e.created_at),
    }
}

fn choices(taken: &[String]) -> Vec<EventChoice> {
    EVENT_TYPES.iter().map(|&name| EventChoice { name, checked: taken.iter().any(|t| t == name) }).collect()
}

fn delivery_row(d: Delivery) -> DeliveryRow {
    let dash = || "—".to_string();
    DeliveryRow {
        status: d.status.as_str(),
        attempts: d.attempts,
        last_status: d.last_status.map_or_else(dash, |s| s.to_string()),
        next_attempt: d.next_attempt_at.map_or_else(dash, when),
        created: when(d.created_at),
        event_type: d.event_type,
        event_id: d.event_id,
        id: d.id,
    }
}

fn attempt_row(a: Attempt) -> AttemptRow {
    AttemptRow {
        attempt: a.attempt,
        at: when(a.at),
        status: a.status.map_or_else(|| "no answer".to_string(), |s| format!("HTTP {s}")),
        error: a.error.unwrap_or_default(),
        response: a.response.unwrap_or_default(),
        duration_ms: a.duration_ms,
    }
}

/// What the endpoint form says: the ticked events and the thresholds written out (an empty
/// threshold field keeps what is there, the defaults for a new endpoint).
struct Settings {
    url: String,
    description: Option<String>,
    events: Vec<String>,
    thresholds: Thresholds,
}

fn settings(signed: &Signed, mut form: HashMap<String, String>) -> Result<Settings, DashError> {
    let events = EVENT_TYPES
        .iter()
        .filter(|e| form.get(**e).is_some_and(|v| v == "on"))
        .map(|e| e.to_string())
        .collect();
    let numbers = |name: &str, v: Option<String>| -> Result<Option<Vec<i64>>, DashError> {
        let Some(text) = field(v) else { return Ok(None) };
        text.split([',', ' '])
            .filter(|n| !n.is_empty())
            .map(|n| n.parse::<i64>())
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
            .map_err(|_| DashError::Invalid {
                layout: signed.layout.clone(),
                message: format!("{name}: whole numbers separated by commas"),
            })
    };
    let thresholds = Thresholds {
        credits_low: numbers("Credits low at", form.remove("credits_low"))?,
        expiring_days: numbers("Expiring in", form.remove("expiring_days"))?,
    };
    Ok(Settings {
        url: field(form.remove("url")).unwrap_or_default(),
        description: field(form.remove("description")),
        events,
        thresholds,
    })
}

#[derive(Debug, Deserialize)]
pub(super) struct ListQuery {
    after: Option<String>,
}

/// `GET /dashboard/webhooks`.
pub(super) async fn list(signed: Signed, q: web::Query<ListQuery>) -> Result<HttpResponse, DashError> {
    let after = field(q.into_inner().after);
    let page = signed.run(move |kg, p| kg.webhooks.list_endpoints(p, after.as_deref(), PAGE)).await?;
    let base = &signed.layout.base;
    let page = WebhooksPage {
        layout: signed.layout.clone(),
        csrf: signed.session.csrf_token.clone(),
        endpoints: page.items.iter().map(row).collect(),
        next: page.next.map(|after| format!("{base}/webhooks?after={}", encode(&after))),
        choices: choices(&[]),
    };
    Ok(html(StatusCode::OK, &page))
}

/// `POST /dashboard/webhooks`: the new endpoint's secret, shown this once.
pub(super) async fn create(
    signed: Signed,
    form: web::Form<HashMap<String, String>>,
) -> Result<HttpResponse, DashError> {
    let form = form.into_inner();
    token_ok(&signed, form.get("csrf_token").map(String::as_str))?;
    let s = settings(&signed, form)?;
    let new = NewEndpoint {
        url: s.url,
        events: s.events,
        description: s.description,
        enabled: Some(true),
        thresholds: Some(s.thresholds),
    };
    let (endpoint, secret) = signed.run(move |kg, p| kg.webhooks.create_endpoint(p, new)).await?;
    let page =
        WebhookSecretPage { layout: signed.layout.clone(), endpoint_id: endpoint.id, secret, rotated: false };
    Ok(html(StatusCode::OK, &page))
}

#[derive(Debug, Deserialize)]
pub(super) struct ShowQuery {
    status: Option<String>,
    after: Option<String>,
}

/// `GET /dashboard/webhooks/{id}`: the endpoint and its deliveries (`?status=` filters).
pub(super) async fn show(
    signed: Signed,
    path: web::Path<String>,
    q: web::Query<ShowQuery>,
) -> Result<HttpResponse, DashError> {
    let id = path.into_inner();
    let q = q.into_inner();
    let (status, after) = (field(q.status), field(q.after));
    let (st, eid) = (status.clone(), id.clone());
    let (endpoint, deliveries) = signed
        .run(move |kg, p| {
            let endpoint = kg.webhooks.get_endpoint(p, &eid)?;
            let deliveries = kg.webhooks.list_deliveries(p, &eid, st.as_deref(), after.as_deref(), PAGE)?;
            Ok((endpoint, deliveries))
        })
        .await?;
    let base = &signed.layout.base;
    let filter = status.as_deref().unwrap_or("");
    let next = deliveries.next.map(|after| {
        let status = status.as_deref().map(|s| format!("status={}&", encode(s))).unwrap_or_default();
        format!("{base}/webhooks/{}?{status}after={}", encode(&id), encode(&after))
    });
    let statuses = [("", "All"), ("pending", "Pending"), ("succeeded", "Succeeded"), ("failed", "Failed")]
        .into_iter()
        .map(|(v, label)| (v, label, v == filter))
        .collect();
    let page = WebhookPage {
        layout: signed.layout.clone(),
        csrf: signed.session.csrf_token.clone(),
        choices: choices(&endpoint.events),
        endpoint: row(&endpoint),
        statuses,
        deliveries: deliveries.items.into_iter().map(delivery_row).collect(),
        next,
    };
    Ok(html(StatusCode::OK, &page))
}

/// `POST /dashboard/webhooks/{id}`: the settings as the form has them.
pub(super) async fn update(
    signed: Signed,
    path: web::Path<String>,
    form: web::Form<HashMap<String, String>>,
) -> Result<HttpResponse, DashError> {
    let form = form.into_inner();
    token_ok(&signed, form.get("csrf_token").map(String::as_str))?;
    let s = settings(&signed, form)?;
    let change = EndpointChange {
        url: Some(s.url),
        events: Some(s.events),
        description: s.description.map_or(Patch::Clear, Patch::Set),
        enabled: None,
        thresholds: Some(s.thresholds),
    };
    let id = path.into_inner();
    let back = format!("{}/webhooks/{}", signed.layout.base, encode(&id));
    signed.run(move |kg, p| kg.webhooks.update_endpoint(p, &id, change)).await?;
    Ok(see_other(back))
}

#[derive(Debug, Deserialize)]
pub(super) struct EnabledForm {
    csrf_token: Option<String>,
    enabled: Option<String>,
}

/// `POST /dashboard/webhooks/{id}/enabled`.
pub(super) async fn set_enabled(
    signed: Signed,
    path: web::Path<String>,
    form: web::Form<EnabledForm>,
) -> Result<HttpResponse, DashError> {
    let form = form.into_inner();
    token_ok(&signed, form.csrf_token.as_deref())?;
    let change =
        EndpointChange { enabled: Some(form.enabled.as_deref() == Some("true")), ..Default::default() };
    let id = path.into_inner();
    let back = format!("{}/webhooks/{}", signed.layout.base, encode(&id));
    signed.run(move |kg, p| kg.webhooks.update_endpoint(p, &id, change)).await?;
    Ok(see_other(back))
}

#[derive(Debug, Deserialize)]
pub(super) struct TokenForm {
    csrf_token: Option<String>,
}

/// `POST /dashboard/webhooks/{id}/rotate`: the new secret, shown this once.
pub(super) async fn rotate(
    signed: Signed,
    path: web::Path<String>,
    form: web::Form<TokenForm>,
) -> Result<HttpResponse, DashError> {
    token_ok(&signed, form.csrf_token.as_deref())?;
    let id = path.into_inner();
    let eid = id.clone();
    let secret = signed.run(move |kg, p| kg.webhooks.rotate_secret(p, &eid)).await?;
    let page = WebhookSecretPage { layout: signed.layout.clone(), endpoint_id: id, secret, rotated: true };
    Ok(html(StatusCode::OK, &page))
}

/// `POST /dashboard/webhooks/{id}/delete`.
pub(super) async fn delete(
    signed: Signed,
    path: web::Path<String>,
    form: web::Form<TokenForm>,
) -> Result<HttpResponse, DashError> {
    token_ok(&signed, form.csrf_token.as_deref())?;
    let id = path.into_inner();
    signed.run(move |kg, p| kg.webhooks.delete_endpoint(p, &id)).await?;
    Ok(see_other(format!("{}/webhooks", signed.layout.base)))
}

/// `GET /dashboard/deliveries/{id}`: the delivery and every attempt with its answer.
pub(super) async fn delivery(signed: Signed, path: web::Path<String>) -> Result<HttpResponse, DashError> {
    let id = path.into_inner();
    let (d, attempts) = signed.run(move |kg, p| kg.webhooks.delivery_attempts(p, &id)).await?;
    let page = DeliveryPage {
        layout: signed.layout.clone(),
        csrf: signed.session.csrf_token.clone(),
        endpoint_id: d.endpoint_id.clone(),
        delivery: delivery_row(d),
        attempts: attempts.into_iter().map(attempt_row).collect(),
    };
    Ok(html(StatusCode::OK, &page))
}

/// `POST /dashboard/deliveries/{id}/replay`: sent again at once; back to the delivery.
pub(super) async fn replay(
    signed: Signed,
    path: web::Path<String>,
    form: web::Form<TokenForm>,
) -> Result<HttpResponse, DashError> {
    token_ok(&signed, form.csrf_token.as_deref())?;
    let id = path.into_inner();
    let back = format!("{}/deliveries/{}", signed.layout.base, encode(&id));
    signed.run(move |kg, p| kg.webhooks.replay_delivery(p, &id)).await?;
    Ok(see_other(back))
}
