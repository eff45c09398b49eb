//! `GET /v1/audit.listEvents`: the caller's workspace's audit log, newest first, a page at
//! a time (keygate's own endpoint; docs/api.md).

use crate::error::ApiError;
use crate::openapi::V1QueryErrors;
use crate::plumbing::{Authed, Query};
use actix_web::HttpResponse;
use keygate_rbac::{AuditFilter, AuditRecord, MAX_AUDIT_PAGE};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// An event type, e.g. key.create.
    #[param(min_length = 1, max_length = 255)]
    event: Option<String>,
    /// A root key id.
    #[param(min_length = 1, max_length = 255)]
    actor: Option<String>,
    #[param(min_length = 1, max_length = 255)]
    resource_id: Option<String>,
    /// Unix ms, inclusive.
    #[param(minimum = -9_223_372_036_854_775_808_i64, maximum = 9_223_372_036_854_775_807_i64)]
    since: Option<i64>,
    /// Unix ms, exclusive.
    #[param(minimum = -9_223_372_036_854_775_808_i64, maximum = 9_223_372_036_854_775_807_i64)]
    until: Option<i64>,
    #[param(minimum = 1, maximum = 100, default = 100)]
    limit: Option<usize>,
    /// The cursor of the previous page.
    #[param(max_length = 1024, pattern = "^-?[0-9]{1,18}:evt_[A-Za-z0-9]+$")]
    cursor: Option<String>,
}

/// One event as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = AuditEvent)]
pub(crate) struct Event {
    id: String,
    event: String,
    actor_id: String,
    resource_type: String,
    resource_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    key_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    role_id: Option<String>,
    /// Unix ms.
    time: i64,
    /// More about the change where the event has it (a migrated key's `key.create`: its
    /// migration id).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    detail: Option<String>,
}

/// A page of events, and the cursor of the next one.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = AuditEvents)]
pub(crate) struct EventPage {
    events: Vec<Event>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    cursor: Option<String>,
}

impl From<AuditRecord> for Event {
    fn from(e: AuditRecord) -> Self {
        Self {
            id: e.id,
            event: e.action,
            actor_id: e.actor_id,
            resource_type: e.resource_type,
            resource_id: e.resource_id,
            key_id: e.key_id,
            role_id: e.role_id,
            time: e.at,
            detail: e.detail,
        }
    }
}

impl ListQuery {
    pub(crate) fn filter(&self) -> AuditFilter {
        AuditFilter {
            action: self.event.clone(),
            actor_id: self.actor.clone(),
            resource_id: self.resource_id.clone(),
            since: self.since,
            until: self.until,
        }
    }
}

/// The workspace's audit events, newest first, a page at a time (needs audit.*.read)
///
/// `GET /v1/audit.listEvents?event=&actor=&resourceId=&since=&until=&limit=&cursor=`.
#[utoipa::path(get, path = "/v1/audit.listEvents", operation_id = "audit.listEvents", tag = "audit",
    params(ListQuery), responses((status = 200, description = "OK", body = EventPage), V1QueryErrors))]
pub async fn list_events(call: Authed<Query<ListQuery>>) -> Result<HttpResponse, ApiError> {
    let page = call
        .run(|kg, p, Query(q)| {
            let limit = q.limit.unwrap_or(MAX_AUDIT_PAGE);
            kg.rbac.list_audit_events(p, &q.filter(), q.cursor.as_deref(), limit)
        })
        .await?;
    let events: Vec<Event> = page.items.into_iter().map(Event::from).collect();
    Ok(HttpResponse::Ok().json(EventPage { events, cursor: page.next }))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(list_events))]
struct Doc;

/// This room's part of the v1 document.
pub(crate) fn openapi() -> serde_json::Value {
    crate::openapi::room::<Doc>()
}
