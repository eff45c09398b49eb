//! v2 `ratelimit.setOverride`, `getOverride`, `listOverrides`, `deleteOverride`: the
//! namespace named by name or `rlns_` id, overrides a page at a time.

use super::{Empty, Envelope, PageEnvelope};
use super::{decode_cursor, ok, ok_empty, ok_page, page_limit};
use crate::error::ApiError;
use crate::openapi::V2Errors;
use crate::plumbing::{Authed, Json, integer};
use actix_web::HttpResponse;
use keygate_domain::{MAX_IDENTIFIER_CHARS, ValidationError, check_len, validate_namespace_name};
use keygate_rbac::{NamespaceRef, Override};
use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};
use utoipa::ToSchema;

/// The longest override window v2 takes: 30 days.
const MAX_DURATION_MS: u64 = 2_592_000_000;

/// v2's Override.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Override)]
struct OverrideObject {
    override_id: String,
    identifier: String,
    limit: u64,
    duration: u64,
}

impl From<Override> for OverrideObject {
    fn from(o: Override) -> Self {
        Self { override_id: o.id, identifier: o.identifier, limit: o.limit, duration: o.duration }
    }
}

/// A namespace by name, else by id (never created here).
fn namespace(name: &str) -> Result<NamespaceRef, ApiError> {
    validate_namespace_name("namespace", name)?;
    Ok(NamespaceRef { id: None, name: Some(name.to_string()) })
}

#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct SetOverrideBody {
    /// The namespace's name (or `rlns_` id).
    #[schema(min_length = 1, max_length = 512)]
    namespace: String,
    #[schema(min_length = 1, max_length = 512)]
    identifier: String,
    /// 0 denies everything.
    #[schema(value_type = u64, minimum = 0, maximum = 9_007_199_254_740_991_u64)]
    limit: Number,
    /// The window in ms (at most 30 days).
    #[schema(value_type = u64, minimum = 1000, maximum = 2_592_000_000_u64)]
    duration: Number,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct OverrideSet {
    override_id: String,
}

/// Create or update an override
///
/// An upsert keeping the id.
#[utoipa::path(post, path = "/v2/ratelimit.setOverride", operation_id = "ratelimit.setOverride", tag = "ratelimit",
    request_body = SetOverrideBody, responses((status = 200, description = "OK", body = Envelope<OverrideSet>), V2Errors))]
pub async fn set_override(call: Authed<Json<SetOverrideBody>>) -> Result<HttpResponse, ApiError> {
    let b = &call.input.0;
    let ns = namespace(&b.namespace)?;
    check_len("identifier", &b.identifier, MAX_IDENTIFIER_CHARS)?;
    // 0 denies everything.
    let limit = integer("limit", &b.limit, 0)?;
    let duration = integer("duration", &b.duration, 1_000)?;
    if duration > MAX_DURATION_MS {
        return Err(ValidationError::new("duration", format!("must be <= {MAX_DURATION_MS}")).into());
    }
    let stored = call
        .run(move |kg, p, Json(b)| kg.rbac.set_override(p, &ns, &b.identifier, limit, duration, false))
        .await?;
    Ok(ok(OverrideSet { override_id: stored.id }))
}

#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct OverrideRefBody {
    /// The namespace's name (or `rlns_` id).
    #[schema(min_length = 1, max_length = 512)]
    namespace: String,
    #[schema(min_length = 1, max_length = 512)]
    identifier: String,
}

/// The override of exactly this identifier
#[utoipa::path(post, path = "/v2/ratelimit.getOverride", operation_id = "ratelimit.getOverride", tag = "ratelimit",
    request_body = OverrideRefBody, responses((status = 200, description = "OK", body = Envelope<OverrideObject>), V2Errors))]
pub async fn get_override(call: Authed<Json<OverrideRefBody>>) -> Result<HttpResponse, ApiError> {
    let ns = namespace(&call.input.0.namespace)?;
    let found = call.run(move |kg, p, Json(b)| kg.rbac.get_override(p, &ns, &b.identifier)).await?;
    Ok(ok(OverrideObject::from(found)))
}

/// Delete an override
///
/// The next limit call no longer applies it.
#[utoipa::path(post, path = "/v2/ratelimit.deleteOverride", operation_id = "ratelimit.deleteOverride", tag = "ratelimit",
    request_body = OverrideRefBody, responses((status = 200, description = "OK", body = Envelope<Empty>), V2Errors))]
pub async fn delete_override(call: Authed<Json<OverrideRefBody>>) -> Result<HttpResponse, ApiError> {
    let ns = namespace(&call.input.0.namespace)?;
    call.run(move |kg, p, Json(b)| kg.rbac.delete_override(p, &ns, &b.identifier)).await?;
    Ok(ok_empty())
}

#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct ListOverridesBody {
    /// The namespace's name (or `rlns_` id).
    #[schema(min_length = 1, max_length = 512)]
    namespace: String,
    /// Items per page (default 10).
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 100)]
    limit: Option<Number>,
    /// The cursor of the previous page.
    #[schema(min_length = 6, max_length = 1024, pattern = "^kgc1:[^\\u0000]+$")]
    cursor: Option<String>,
}

/// A page of overrides, by identifier
#[utoipa::path(post, path = "/v2/ratelimit.listOverrides", operation_id = "ratelimit.listOverrides", tag = "ratelimit",
    request_body = ListOverridesBody, responses((status = 200, description = "OK", body = PageEnvelope<OverrideObject>), V2Errors))]
pub async fn list_overrides(call: Authed<Json<ListOverridesBody>>) -> Result<HttpResponse, ApiError> {
    let b = &call.input.0;
    let ns = namespace(&b.namespace)?;
    let limit = page_limit(&b.limit, 10)?;
    let after = decode_cursor(b.cursor.as_deref())?;
    let page = call.run(move |kg, p, _| kg.rbac.list_overrides_page(p, &ns, after.as_deref(), limit)).await?;
    Ok(ok_page(page, OverrideObject::from))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(set_override, get_override, list_overrides, delete_override))]
struct Doc;

/// This room's part of the v2 document.
pub(crate) fn openapi() -> Value {
    crate::openapi::room::<Doc>()
}
