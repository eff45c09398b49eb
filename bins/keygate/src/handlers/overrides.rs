//! `ratelimits.setOverride`, `getOverride`, `listOverrides`, `deleteOverride`.

use crate::error::ApiError;
use crate::http::{authenticate, blocking, integer, read_json, read_query};
use crate::state::AppState;
use actix_web::{HttpRequest, HttpResponse, web};
use keygate_rbac::{NamespaceRef, Override};
use serde::{Deserialize, Serialize};
use serde_json::Number;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SetOverrideBody {
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
struct OverrideRefBody {
    namespace_id: Option<String>,
    namespace_name: Option<String>,
    identifier: Option<String>,
}

impl OverrideRefBody {
    fn namespace(&self) -> NamespaceRef {
        NamespaceRef { id: self.namespace_id.clone(), name: self.namespace_name.clone() }
    }

    fn identifier(self) -> Result<String, ApiError> {
        self.identifier.ok_or_else(|| ApiError::bad_request("identifier: is required"))
    }
}

#[derive(Debug, Serialize)]
struct OverrideResponse {
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
pub async fn set_override(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let principal = authenticate(&req, &state).await?;
    let body: SetOverrideBody = read_json(&req, payload).await?;
    let limit = integer("limit", &body.limit, 1)?;
    let duration = integer("duration", &body.duration, 1_000)?;
    let ns = NamespaceRef { id: body.namespace_id, name: body.namespace_name };
    let is_async = body.is_async.unwrap_or(false);
    let stored = blocking(move || {
        Ok(state.rbac.set_override(&principal, &ns, &body.identifier, limit, duration, is_async)?)
    })
    .await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "overrideId": stored.id })))
}

/// `GET ratelimits.getOverride?namespaceId|namespaceName=...&identifier=...`
pub async fn get_override(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let principal = authenticate(&req, &state).await?;
    let q = read_query::<OverrideRefBody>(&req)?;
    let ns = q.namespace();
    let identifier = q.identifier()?;
    let found = blocking(move || Ok(state.rbac.get_override(&principal, &ns, &identifier)?)).await?;
    Ok(HttpResponse::Ok().json(OverrideResponse::from(found)))
}

/// `GET ratelimits.listOverrides?namespaceId|namespaceName=...`: every override, oldest
/// first, in one page (`cursor` and `limit` are accepted and ignored: at most 1000 exist).
pub async fn list_overrides(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let principal = authenticate(&req, &state).await?;
    let ns = read_query::<OverrideRefBody>(&req)?.namespace();
    let all = blocking(move || Ok(state.rbac.list_overrides(&principal, &ns)?)).await?;
    let total = all.len();
    let overrides: Vec<OverrideResponse> = all.into_iter().map(Into::into).collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({ "overrides": overrides, "total": total })))
}

/// `ratelimits.deleteOverride`: `{}`.
pub async fn delete_override(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let principal = authenticate(&req, &state).await?;
    let body: OverrideRefBody = read_json(&req, payload).await?;
    let ns = body.namespace();
    let identifier = body.identifier()?;
    blocking(move || Ok(state.rbac.delete_override(&principal, &ns, &identifier)?)).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({})))
}
