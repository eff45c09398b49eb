//! `ratelimits.setOverride`, `getOverride`, `listOverrides`, `deleteOverride`.

use super::empty;
use crate::error::ApiError;
use crate::http::{Authed, Json, Query, integer};
use actix_web::HttpResponse;
use keygate_rbac::{NamespaceRef, Override};
use serde::{Deserialize, Serialize};
use serde_json::Number;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SetOverrideBody {
    namespace_id: Option<String>,
    namespace_name: Option<String>,
    identifier: String,
    limit: Number,
    duration: Number,
    #[serde(rename = "async")]
    is_async: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct OverrideRefBody {
    namespace_id: Option<String>,
    namespace_name: Option<String>,
    identifier: Option<String>,
}

impl OverrideRefBody {
    fn namespace(&self) -> NamespaceRef {
        NamespaceRef { id: self.namespace_id.clone(), name: self.namespace_name.clone() }
    }

    fn identifier(&self) -> Result<String, ApiError> {
        self.identifier.clone().ok_or_else(|| ApiError::bad_request("identifier: is required"))
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct OverrideResponse {
    id: String,
    identifier: String,
    limit: u64,
    duration: u64,
    #[serde(rename = "async")]
    is_async: bool,
}

impl From<Override> for OverrideResponse {
    fn from(o: Override) -> Self {
        Self {
            id: o.id,
            identifier: o.identifier,
            limit: o.limit,
            duration: o.duration,
            is_async: o.is_async,
        }
    }
}

/// `ratelimits.setOverride`: `{"overrideId"}`; creates or updates.
pub async fn set_override(call: Authed<Json<SetOverrideBody>>) -> Result<HttpResponse, ApiError> {
    let body = &call.input.0;
    let limit = integer("limit", &body.limit, 1)?;
    let duration = integer("duration", &body.duration, 1_000)?;
    let is_async = body.is_async.unwrap_or(false);
    let stored = call
        .run(move |rbac, principal, Json(body)| {
            let ns = NamespaceRef { id: body.namespace_id, name: body.namespace_name };
            rbac.set_override(principal, &ns, &body.identifier, limit, duration, is_async)
        })
        .await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "overrideId": stored.id })))
}

/// `GET ratelimits.getOverride?namespaceId|namespaceName=...&identifier=...`
pub async fn get_override(call: Authed<Query<OverrideRefBody>>) -> Result<HttpResponse, ApiError> {
    let identifier = call.input.0.identifier()?;
    let found = call
        .run(move |rbac, principal, Query(q)| rbac.get_override(principal, &q.namespace(), &identifier))
        .await?;
    Ok(HttpResponse::Ok().json(OverrideResponse::from(found)))
}

/// `GET ratelimits.listOverrides?namespaceId|namespaceName=...`: every override, oldest
/// first, in one page (`cursor` and `limit` are accepted and ignored: at most 1000 exist).
pub async fn list_overrides(call: Authed<Query<OverrideRefBody>>) -> Result<HttpResponse, ApiError> {
    let all = call.run(|rbac, principal, Query(q)| rbac.list_overrides(principal, &q.namespace())).await?;
    let total = all.len();
    let overrides: Vec<OverrideResponse> = all.into_iter().map(Into::into).collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({ "overrides": overrides, "total": total })))
}

/// `ratelimits.deleteOverride`: `{}`.
pub async fn delete_override(call: Authed<Json<OverrideRefBody>>) -> Result<HttpResponse, ApiError> {
    let identifier = call.input.0.identifier()?;
    call.run(move |rbac, principal, Json(body)| {
        rbac.delete_override(principal, &body.namespace(), &identifier)
    })
    .await?;
    Ok(empty())
}
