//! `/dashboard/audit`: the workspace's audit log, newest first, filtered by action, actor
//! and resource, 50 events a page. Needs `audit.*.read` (as `audit.list`).

use super::answer::{DashError, call, html};
use super::forms::{encode, when};
use super::session::Signed;
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use keygate_rbac::AuditFilter;
use keygate_web::AuditPage;
use serde::Deserialize;

const PAGE: usize = 50;

#[derive(Debug, Deserialize)]
pub(super) struct AuditQuery {
    action: Option<String>,
    actor: Option<String>,
    resource: Option<String>,
    cursor: Option<String>,
}

/// A filter field: trimmed, `None` when empty.
fn given(v: &Option<String>) -> Option<String> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty()).map(str::to_string)
}

pub(super) async fn list(signed: Signed, q: web::Query<AuditQuery>) -> Result<HttpResponse, DashError> {
    let Signed { session, layout, state } = signed;
    let q = q.into_inner();
    let filter = AuditFilter {
        action: given(&q.action),
        actor_id: given(&q.actor),
        resource_id: given(&q.resource),
        ..AuditFilter::default()
    };
    let (p, f, cursor) = (session.principal.clone(), filter.clone(), given(&q.cursor));
    let page = call(&layout, move || state.rbac.list_audit_events(&p, &f, cursor.as_deref(), PAGE)).await?;
    let next = page.next.map(|cursor| {
        let mut link = format!("{}/audit?cursor={}", layout.base, encode(&cursor));
        for (name, v) in
            [("action", &filter.action), ("actor", &filter.actor_id), ("resource", &filter.resource_id)]
        {
            if let Some(v) = v {
                link.push_str(&format!("&{name}={}", encode(v)));
            }
        }
        link
    });
    let events = page.items.into_iter().map(|e| (when(e.at), e.action, e.resource_id, e.actor_id)).collect();
    let page = AuditPage {
        action: filter.action.unwrap_or_default(),
        actor: filter.actor_id.unwrap_or_default(),
        resource: filter.resource_id.unwrap_or_default(),
        events,
        next,
        layout,
    };
    Ok(html(StatusCode::OK, &page))
}
