//! v2 `webhooks.*` (API-v2.md §23): a workspace's endpoints, their secrets, the delivery
//! log and replay. Events are written by the services as keys change and delivered by the
//! runtime's worker (`keygate-webhooks`).

use super::{Empty, Envelope, PageEnvelope, decode_cursor, ok, ok_empty, ok_page, page_limit};
use crate::error::ApiError;
use crate::handlers::keys::read::KeyObject;
use crate::openapi::V2Errors;
use crate::plumbing::{Authed, Json};
use actix_web::HttpResponse;
use keygate_domain::Patch;
use keygate_webhooks::{Delivery, Endpoint, EndpointChange, NewEndpoint, Thresholds};
use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};
use utoipa::ToSchema;

/// Shows keys in events' `data` as v2's `getKey` does (set once per runtime).
pub(crate) fn render_keys_as_v2(runtime: &keygate_runtime::Runtime) {
    runtime.webhooks.outbox().set_key_renderer(Box::new(|summary| {
        serde_json::to_value(KeyObject::from(summary)).unwrap_or(Value::Null)
    }));
}

/// An event type, or `*` for all.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub(crate) enum EventName {
    #[schema(rename = "*")]
    All,
    #[schema(rename = "key.created")]
    KeyCreated,
    #[schema(rename = "key.updated")]
    KeyUpdated,
    #[schema(rename = "key.deleted")]
    KeyDeleted,
    #[schema(rename = "key.rerolled")]
    KeyRerolled,
    #[schema(rename = "key.expiring")]
    KeyExpiring,
    #[schema(rename = "key.expired")]
    KeyExpired,
    #[schema(rename = "key.credits.low")]
    KeyCreditsLow,
    #[schema(rename = "key.credits.exhausted")]
    KeyCreditsExhausted,
    #[schema(rename = "identity.credits.low")]
    IdentityCreditsLow,
    #[schema(rename = "identity.credits.exhausted")]
    IdentityCreditsExhausted,
    #[schema(rename = "key.leaked")]
    KeyLeaked,
}

/// When the threshold events fire.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ThresholdsObject {
    /// Percent of the credits spent at which `*.credits.low` fires (default `[80]`).
    #[schema(schema_with = crate::openapi::kinds::credits_low_percents)]
    credits_low: Option<Vec<Number>>,
    /// Days before `expires` at which `key.expiring` fires (default `[7, 1]`).
    #[schema(schema_with = crate::openapi::kinds::expiring_days)]
    expiring_days: Option<Vec<Number>>,
}

impl ThresholdsObject {
    fn into_thresholds(self) -> Result<Thresholds, ApiError> {
        let list = |field: &str, v: Option<Vec<Number>>| -> Result<Option<Vec<i64>>, ApiError> {
            v.map(|v| {
                v.iter()
                    .enumerate()
                    .map(|(i, n)| {
                        let path = format!("thresholds.{field}.{i}");
                        crate::plumbing::integer(&path, n, 1).map(|n| i64::try_from(n).unwrap_or(i64::MAX))
                    })
                    .collect::<Result<Vec<i64>, _>>()
            })
            .transpose()
            .map_err(ApiError::from)
        };
        Ok(Thresholds {
            credits_low: list("creditsLow", self.credits_low)?,
            expiring_days: list("expiringDays", self.expiring_days)?,
        })
    }
}

/// v2's webhook endpoint.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = WebhookEndpoint)]
pub(crate) struct EndpointObject {
    endpoint_id: String,
    url: String,
    #[schema(value_type = Vec<EventName>)]
    events: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    description: Option<String>,
    enabled: bool,
    #[schema(value_type = Object)]
    thresholds: Value,
    created_at: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    updated_at: Option<i64>,
}

impl From<Endpoint> for EndpointObject {
    fn from(e: Endpoint) -> Self {
        Self {
            endpoint_id: e.id,
            url: e.url,
            events: e.events,
            description: e.description,
            enabled: e.enabled,
            thresholds: serde_json::json!({ "creditsLow": e.credits_low, "expiringDays": e.expiring_days }),
            created_at: e.created_at,
            updated_at: e.updated_at,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreateEndpointBody {
    /// An http or https URL; not of this machine or a private network unless
    /// `KEYGATE_WEBHOOKS_ALLOW_PRIVATE` allows it.
    #[schema(
        min_length = 1,
        max_length = 2048,
        pattern = "^https?://[A-Za-z0-9][A-Za-z0-9.-]*(:[0-9]{1,5})?([/?#][^\\s\"'<>\\\\`\\u0000-\\u001f\\u007f-\\u009f]*)?$"
    )]
    url: String,
    /// 1–50 event types, or `["*"]`.
    #[schema(value_type = Vec<EventName>, min_items = 1, max_items = 50)]
    events: Vec<String>,
    #[schema(max_length = 1024, pattern = "^[^\\u0000-\\u0008\\u000b-\\u001f\\u007f-\\u009f]*$")]
    description: Option<String>,
    enabled: Option<bool>,
    thresholds: Option<ThresholdsObject>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreatedEndpoint {
    endpoint_id: String,
    /// `whsec_…`: shown this once.
    secret: String,
}

/// Register an endpoint for events
///
/// Its secret (`whsec_…`) signs every delivery (Standard Webhooks) and is shown only here.
#[utoipa::path(post, path = "/v2/webhooks.createEndpoint", operation_id = "webhooks.createEndpoint", tag = "webhooks",
    request_body = CreateEndpointBody,
    responses((status = 200, description = "OK", body = Envelope<CreatedEndpoint>), V2Errors))]
pub async fn create_endpoint(call: Authed<Json<CreateEndpointBody>>) -> Result<HttpResponse, ApiError> {
    let (endpoint, secret) = call
        .run(move |kg, p, Json(b)| {
            let thresholds = b.thresholds.map(ThresholdsObject::into_thresholds).transpose()?;
            let new = NewEndpoint {
                url: b.url,
                events: b.events,
                description: b.description,
                enabled: b.enabled,
                thresholds,
            };
            Ok::<_, ApiError>(kg.webhooks.create_endpoint(p, new)?)
        })
        .await?;
    Ok(ok(CreatedEndpoint { endpoint_id: endpoint.id, secret }))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EndpointRefBody {
    #[schema(min_length = 1, max_length = 255)]
    endpoint_id: String,
}

/// Read an endpoint
#[utoipa::path(post, path = "/v2/webhooks.getEndpoint", operation_id = "webhooks.getEndpoint", tag = "webhooks",
    request_body = EndpointRefBody,
    responses((status = 200, description = "OK", body = Envelope<EndpointObject>), V2Errors))]
pub async fn get_endpoint(call: Authed<Json<EndpointRefBody>>) -> Result<HttpResponse, ApiError> {
    let e = call.run(move |kg, p, Json(b)| kg.webhooks.get_endpoint(p, &b.endpoint_id)).await?;
    Ok(ok(EndpointObject::from(e)))
}

#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct ListEndpointsBody {
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 100)]
    limit: Option<Number>,
    #[schema(min_length = 6, max_length = 1024, pattern = "^kgc1:[^\\u0000]+$")]
    cursor: Option<String>,
}

/// The workspace's endpoints, by id
#[utoipa::path(post, path = "/v2/webhooks.listEndpoints", operation_id = "webhooks.listEndpoints", tag = "webhooks",
    request_body = ListEndpointsBody,
    responses((status = 200, description = "OK", body = PageEnvelope<EndpointObject>), V2Errors))]
pub async fn list_endpoints(call: Authed<Json<ListEndpointsBody>>) -> Result<HttpResponse, ApiError> {
    let b = &call.input.0;
    let limit = page_limit(&b.limit, 100)?;
    let after = decode_cursor(b.cursor.as_deref())?;
    let page = call.run(move |kg, p, _| kg.webhooks.list_endpoints(p, after.as_deref(), limit)).await?;
    Ok(ok_page(page, EndpointObject::from))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UpdateEndpointBody {
    #[schema(min_length = 1, max_length = 255)]
    endpoint_id: String,
    #[schema(
        min_length = 1,
        max_length = 2048,
        pattern = "^https?://[A-Za-z0-9][A-Za-z0-9.-]*(:[0-9]{1,5})?([/?#][^\\s\"'<>\\\\`\\u0000-\\u001f\\u007f-\\u009f]*)?$"
    )]
    url: Option<String>,
    #[schema(value_type = Option<Vec<EventName>>, min_items = 1, max_items = 50)]
    events: Option<Vec<String>>,
    /// Null clears it.
    #[serde(default)]
    #[schema(value_type = Option<String>, max_length = 1024, pattern = "^[^\\u0000-\\u0008\\u000b-\\u001f\\u007f-\\u009f]*$")]
    description: Patch<String>,
    enabled: Option<bool>,
    thresholds: Option<ThresholdsObject>,
}

/// Change an endpoint
///
/// The fields given change; the others stay.
#[utoipa::path(post, path = "/v2/webhooks.updateEndpoint", operation_id = "webhooks.updateEndpoint", tag = "webhooks",
    request_body = UpdateEndpointBody,
    responses((status = 200, description = "OK", body = Envelope<EndpointObject>), V2Errors))]
pub async fn update_endpoint(call: Authed<Json<UpdateEndpointBody>>) -> Result<HttpResponse, ApiError> {
    let e = call
        .run(move |kg, p, Json(b)| {
            let thresholds = b.thresholds.map(ThresholdsObject::into_thresholds).transpose()?;
            let change = EndpointChange {
                url: b.url,
                events: b.events,
                description: b.description,
                enabled: b.enabled,
                thresholds,
            };
            Ok::<_, ApiError>(kg.webhooks.update_endpoint(p, &b.endpoint_id, change)?)
        })
        .await?;
    Ok(ok(EndpointObject::from(e)))
}

/// Delete an endpoint and its deliveries
#[utoipa::path(post, path = "/v2/webhooks.deleteEndpoint", operation_id = "webhooks.deleteEndpoint", tag = "webhooks",
    request_body = EndpointRefBody,
    responses((status = 200, description = "OK", body = Envelope<Empty>), V2Errors))]
pub async fn delete_endpoint(call: Authed<Json<EndpointRefBody>>) -> Result<HttpResponse, ApiError> {
    call.run(move |kg, p, Json(b)| kg.webhooks.delete_endpoint(p, &b.endpoint_id)).await?;
    Ok(ok_empty())
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RotatedSecret {
    /// The new `whsec_…`, shown this once; the one before signs too for 24 hours.
    secret: String,
}

/// Rotate an endpoint's secret
///
/// For 24 hours both secrets sign: `webhook-signature` carries two signatures.
#[utoipa::path(post, path = "/v2/webhooks.rotateSecret", operation_id = "webhooks.rotateSecret", tag = "webhooks",
    request_body = EndpointRefBody,
    responses((status = 200, description = "OK", body = Envelope<RotatedSecret>), V2Errors))]
pub async fn rotate_secret(call: Authed<Json<EndpointRefBody>>) -> Result<HttpResponse, ApiError> {
    let secret = call.run(move |kg, p, Json(b)| kg.webhooks.rotate_secret(p, &b.endpoint_id)).await?;
    Ok(ok(RotatedSecret { secret }))
}

/// Where a delivery stands.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub(crate) enum DeliveryStatusName {
    #[schema(rename = "pending")]
    Pending,
    #[schema(rename = "succeeded")]
    Succeeded,
    #[schema(rename = "failed")]
    Failed,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListDeliveriesBody {
    #[schema(min_length = 1, max_length = 255)]
    endpoint_id: String,
    #[schema(value_type = Option<DeliveryStatusName>)]
    status: Option<String>,
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 100)]
    limit: Option<Number>,
    #[schema(min_length = 6, max_length = 1024, pattern = "^kgc1:[^\\u0000]+$")]
    cursor: Option<String>,
}

/// A delivery of an event to an endpoint.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = WebhookDelivery)]
pub(crate) struct DeliveryObject {
    delivery_id: String,
    endpoint_id: String,
    /// The event's id: the `webhook-id` of every attempt.
    event_id: String,
    #[serde(rename = "type")]
    #[schema(value_type = EventName)]
    event_type: String,
    #[schema(value_type = DeliveryStatusName)]
    status: &'static str,
    attempts: i64,
    /// The HTTP status of the last answer (null: none yet, or none came).
    #[schema(required = true)]
    last_status: Option<i64>,
    /// When the next attempt is due (null: none is).
    #[schema(required = true)]
    next_attempt_at: Option<i64>,
    created_at: i64,
}

impl From<Delivery> for DeliveryObject {
    fn from(d: Delivery) -> Self {
        Self {
            delivery_id: d.id,
            endpoint_id: d.endpoint_id,
            event_id: d.event_id,
            event_type: d.event_type,
            status: d.status.as_str(),
            attempts: d.attempts,
            last_status: d.last_status,
            next_attempt_at: d.next_attempt_at,
            created_at: d.created_at,
        }
    }
}

/// An endpoint's deliveries, newest first
#[utoipa::path(post, path = "/v2/webhooks.listDeliveries", operation_id = "webhooks.listDeliveries", tag = "webhooks",
    request_body = ListDeliveriesBody,
    responses((status = 200, description = "OK", body = PageEnvelope<DeliveryObject>), V2Errors))]
pub async fn list_deliveries(call: Authed<Json<ListDeliveriesBody>>) -> Result<HttpResponse, ApiError> {
    let b = &call.input.0;
    let limit = page_limit(&b.limit, 100)?;
    let before = decode_cursor(b.cursor.as_deref())?;
    let page = call
        .run(move |kg, p, Json(b)| {
            kg.webhooks.list_deliveries(p, &b.endpoint_id, b.status.as_deref(), before.as_deref(), limit)
        })
        .await?;
    Ok(ok_page(page, DeliveryObject::from))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeliveryRefBody {
    #[schema(min_length = 1, max_length = 255)]
    delivery_id: String,
}

/// Send a delivery again, now
///
/// The same event id and body; its attempts go on counting.
#[utoipa::path(post, path = "/v2/webhooks.replayDelivery", operation_id = "webhooks.replayDelivery", tag = "webhooks",
    request_body = DeliveryRefBody,
    responses((status = 200, description = "OK", body = Envelope<DeliveryObject>), V2Errors))]
pub async fn replay_delivery(call: Authed<Json<DeliveryRefBody>>) -> Result<HttpResponse, ApiError> {
    let d = call.run(move |kg, p, Json(b)| kg.webhooks.replay_delivery(p, &b.delivery_id)).await?;
    Ok(ok(DeliveryObject::from(d)))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(
    create_endpoint,
    get_endpoint,
    list_endpoints,
    update_endpoint,
    delete_endpoint,
    rotate_secret,
    list_deliveries,
    replay_delivery
))]
struct Doc;

/// This room's part of the v2 document: event types are distinct.
pub(crate) fn openapi() -> Value {
    let mut doc = crate::openapi::room::<Doc>();
    for body in ["CreateEndpointBody", "UpdateEndpointBody"] {
        crate::openapi::schema_mut(&mut doc, body)["properties"]["events"]["uniqueItems"] = true.into();
    }
    doc
}
