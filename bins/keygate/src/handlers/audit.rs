//! `GET /v1/audit.listEvents`: the caller's workspace's audit log, newest first, a page at
//! a time (keygate's own endpoint; docs/api.md).

use crate::error::ApiError;
use crate::http::{Authed, Query};
use actix_web::HttpResponse;
use keygate_rbac::{AuditFilter, AuditRecord, MAX_AUDIT_PAGE};
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListQuery {
    /// The event type (`key.create`, `role.attach_permission`, ...).
    event: Option<String>,
    /// The root key that acted.
    actor: Option<String>,
    resource_id: Option<String>,
    /// From (inclusive) and until (exclusive), Unix ms.
    since: Option<i64>,
    until: Option<i64>,
    limit: Option<usize>,
    cursor: Option<String>,
}

/// One event as the API shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Event {
    id: String,
    event: String,
    actor_id: String,
    resource_type: String,
    resource_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    key_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    role_id: Option<String>,
    time: i64,
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

/// `GET /v1/audit.listEvents?event=&actor=&resourceId=&since=&until=&limit=&cursor=`:
/// `{"events": [...], "cursor"?}`; needs `audit.*.read`.
pub async fn list_events(call: Authed<Query<ListQuery>>) -> Result<HttpResponse, ApiError> {
    let page = call
        .run(|rbac, p, Query(q)| {
            let limit = q.limit.unwrap_or(MAX_AUDIT_PAGE);
            rbac.list_audit_events(p, &q.filter(), q.cursor.as_deref(), limit)
        })
        .await?;
    let events: Vec<Event> = page.items.into_iter().map(Event::from).collect();
    let body = match page.next {
        Some(cursor) => serde_json::json!({ "events": events, "cursor": cursor }),
        None => serde_json::json!({ "events": events }),
    };
    Ok(HttpResponse::Ok().json(body))
}
