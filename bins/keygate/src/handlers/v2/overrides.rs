//! v2 `ratelimit.setOverride`, `getOverride`, `listOverrides`, `deleteOverride`: the
//! namespace named by name or `rlns_` id, overrides a page at a time.

use super::{decode_cursor, ok, ok_empty, ok_page, page_limit};
use crate::error::ApiError;
use crate::http::{Authed, Json, integer};
use actix_web::HttpResponse;
use keygate_domain::{MAX_IDENTIFIER_CHARS, ValidationError, check_len, validate_namespace_name};
use keygate_rbac::{NamespaceRef, Override};
use serde::{Deserialize, Serialize};
use serde_json::Number;

/// The longest override window v2 takes: 30 days.
const MAX_DURATION_MS: u64 = 2_592_000_000;

/// v2's Override.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
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

#[derive(Debug, Deserialize)]
pub(crate) struct SetOverrideBody {
    namespace: String,
    identifier: String,
    limit: Number,
    duration: Number,
}

/// `ratelimit.setOverride`: `{overrideId}`; an upsert keeping the id.
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
        .run(move |rbac, p, Json(b)| rbac.set_override(p, &ns, &b.identifier, limit, duration, false))
        .await?;
    Ok(ok(serde_json::json!({ "overrideId": stored.id })))
}

#[derive(Debug, Deserialize)]
pub(crate) struct OverrideRefBody {
    namespace: String,
    identifier: String,
}

/// `ratelimit.getOverride`: the override whose identifier equals the string.
pub async fn get_override(call: Authed<Json<OverrideRefBody>>) -> Result<HttpResponse, ApiError> {
    let ns = namespace(&call.input.0.namespace)?;
    let found = call.run(move |rbac, p, Json(b)| rbac.get_override(p, &ns, &b.identifier)).await?;
    Ok(ok(OverrideObject::from(found)))
}

/// `ratelimit.deleteOverride`: `{}`; the next limit call no longer applies it.
pub async fn delete_override(call: Authed<Json<OverrideRefBody>>) -> Result<HttpResponse, ApiError> {
    let ns = namespace(&call.input.0.namespace)?;
    call.run(move |rbac, p, Json(b)| rbac.delete_override(p, &ns, &b.identifier)).await?;
    Ok(ok_empty())
}

#[derive(Debug, Deserialize)]
pub(crate) struct ListOverridesBody {
    namespace: String,
    limit: Option<Number>,
    cursor: Option<String>,
}

/// `ratelimit.listOverrides {namespace, limit?, cursor?}`: a page, by identifier.
pub async fn list_overrides(call: Authed<Json<ListOverridesBody>>) -> Result<HttpResponse, ApiError> {
    let b = &call.input.0;
    let ns = namespace(&b.namespace)?;
    let limit = page_limit(&b.limit, 10)?;
    let after = decode_cursor(b.cursor.as_deref())?;
    let page = call.run(move |rbac, p, _| rbac.list_overrides_page(p, &ns, after.as_deref(), limit)).await?;
    Ok(ok_page(page, OverrideObject::from))
}
