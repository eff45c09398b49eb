//! v2 `rootKeys.*` (API-v2.md §19): root keys created, listed, changed, rerolled and
//! deleted by a root key holding `rootkey.*.<action>`, never granting more than it holds.

use super::{Empty, Envelope, PageEnvelope, check_key_id, decode_cursor, ok, ok_empty, ok_page, page_limit};
use crate::error::ApiError;
use crate::openapi::V2Errors;
use crate::plumbing::{Authed, Json, integer};
use actix_web::HttpResponse;
use keygate_domain::{Patch, ValidationError};
use keygate_rbac::{MAX_ROOT_KEY_EXPIRES_MS, NewRootKey, RootKey, RootKeyChange};
use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};
use utoipa::ToSchema;

/// A root key's secret, shown once.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreatedRootKey {
    key_id: String,
    /// The secret: shown in this answer only (keygate keeps its hash).
    key: String,
}

/// A root key as `listKeys` shows it (never its secret).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = RootKey)]
pub(crate) struct RootKeyObject {
    key_id: String,
    name: Option<String>,
    /// The secret's first characters.
    start: String,
    /// The secret's last 4 characters (empty for keys made before keygate kept them).
    end: String,
    enabled: bool,
    created_at: i64,
    /// When it last authenticated a request (unix ms, within a minute); 0: never.
    last_used_at: i64,
    expires: Option<i64>,
    permissions: Vec<String>,
}

impl From<RootKey> for RootKeyObject {
    fn from(k: RootKey) -> Self {
        Self {
            key_id: k.id,
            name: k.name,
            start: k.prefix,
            end: k.end,
            enabled: k.enabled,
            created_at: k.created_at,
            last_used_at: k.last_used_at.unwrap_or(0),
            expires: k.expires_at,
            permissions: k.permissions,
        }
    }
}

/// An optional unix-ms time or duration (null: none), at most 2100-01-01.
fn ms(path: &str, n: &Option<Number>) -> Result<Option<i64>, ApiError> {
    let Some(n) = n else { return Ok(None) };
    let v = integer(path, n, 0)?;
    if v > MAX_ROOT_KEY_EXPIRES_MS as u64 {
        return Err(ValidationError::new(path, format!("must be <= {MAX_ROOT_KEY_EXPIRES_MS}")).into());
    }
    Ok(Some(v as i64))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreateRootKeyBody {
    /// What the new key may do: each one held (or matched by a pattern held) by the caller.
    #[schema(min_items = 1, max_items = 1000, example = json!(["api.*.read_key"]))]
    permissions: Vec<String>,
    #[schema(min_length = 1, max_length = 255)]
    name: Option<String>,
    /// Unix ms; null or absent: never (an expiring caller must give one no later than its own).
    #[schema(value_type = Option<u64>, maximum = 4_102_444_800_000_u64)]
    expires: Option<Number>,
}

/// Create a root key
///
/// It holds only permissions the caller holds (403 naming the others), and expires no
/// later than the caller (400). The secret is in this answer only.
#[utoipa::path(post, path = "/v2/rootKeys.createKey", operation_id = "rootKeys.createKey", tag = "rootKeys",
    request_body = CreateRootKeyBody,
    responses((status = 200, description = "OK", body = Envelope<CreatedRootKey>), V2Errors))]
pub async fn create_key(mut call: Authed<Json<CreateRootKeyBody>>) -> Result<HttpResponse, ApiError> {
    let b = &mut call.input.0;
    let expires = ms("expires", &b.expires)?;
    let new = NewRootKey { name: b.name.take(), permissions: std::mem::take(&mut b.permissions), expires };
    let (rk, secret) = call.run(move |kg, p, _| kg.rbac.create_root_key_for(p, new)).await?;
    Ok(ok(CreatedRootKey { key_id: rk.id, key: secret.expose().to_string() }))
}

#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct ListRootKeysBody {
    /// Items per page (default 100).
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 100)]
    limit: Option<Number>,
    /// The cursor of the previous page.
    #[schema(min_length = 6, max_length = 1024, pattern = "^kgc1:[^\\u0000]+$")]
    cursor: Option<String>,
}

/// A page of the workspace's root keys, by id
#[utoipa::path(post, path = "/v2/rootKeys.listKeys", operation_id = "rootKeys.listKeys", tag = "rootKeys",
    request_body = ListRootKeysBody,
    responses((status = 200, description = "OK", body = PageEnvelope<RootKeyObject>), V2Errors))]
pub async fn list_keys(call: Authed<Json<ListRootKeysBody>>) -> Result<HttpResponse, ApiError> {
    let b = &call.input.0;
    let limit = page_limit(&b.limit, 100)?;
    let after = decode_cursor(b.cursor.as_deref())?;
    let page = call.run(move |kg, p, _| kg.rbac.root_keys_page(p, after.as_deref(), limit)).await?;
    Ok(ok_page(page, RootKeyObject::from))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UpdateRootKeyBody {
    #[schema(min_length = 3, max_length = 255)]
    key_id: String,
    /// Absent: unchanged; null: cleared.
    #[serde(default)]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 255)]
    name: Patch<String>,
    /// A root key cannot disable itself.
    enabled: Option<bool>,
    /// Replaces the whole set; each one held by the caller.
    #[schema(min_items = 1, max_items = 1000)]
    permissions: Option<Vec<String>>,
}

/// Change a root key's name, enabled flag or permissions
///
/// Applied on the next request on every instance.
#[utoipa::path(post, path = "/v2/rootKeys.updateKey", operation_id = "rootKeys.updateKey", tag = "rootKeys",
    request_body = UpdateRootKeyBody,
    responses((status = 200, description = "OK", body = Envelope<Empty>), V2Errors))]
pub async fn update_key(mut call: Authed<Json<UpdateRootKeyBody>>) -> Result<HttpResponse, ApiError> {
    let b = &mut call.input.0;
    check_key_id(&b.key_id)?;
    let change = RootKeyChange {
        name: std::mem::take(&mut b.name),
        enabled: b.enabled,
        permissions: b.permissions.take(),
    };
    call.run(move |kg, p, Json(b)| kg.rbac.update_root_key(p, &b.key_id, change)).await?;
    Ok(ok_empty())
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RerollRootKeyBody {
    #[schema(min_length = 3, max_length = 255)]
    key_id: String,
    /// The old key expires this many ms from now (0: at once); null: its expiry stays.
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 4_102_444_800_000_u64)]
    expiration: Option<Number>,
}

/// Reroll a root key: a new secret with the same settings
///
/// The new key copies the old one's name, permissions, enabled flag and expiry; the old
/// one expires `expiration` ms from now. A root key cannot reroll itself.
#[utoipa::path(post, path = "/v2/rootKeys.rerollKey", operation_id = "rootKeys.rerollKey", tag = "rootKeys",
    request_body = RerollRootKeyBody,
    responses((status = 200, description = "OK", body = Envelope<CreatedRootKey>), V2Errors))]
pub async fn reroll_key(call: Authed<Json<RerollRootKeyBody>>) -> Result<HttpResponse, ApiError> {
    let b = &call.input.0;
    check_key_id(&b.key_id)?;
    let expiration = ms("expiration", &b.expiration)?;
    let (rk, secret) =
        call.run(move |kg, p, Json(b)| kg.rbac.reroll_root_key(p, &b.key_id, expiration)).await?;
    Ok(ok(CreatedRootKey { key_id: rk.id, key: secret.expose().to_string() }))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeleteRootKeyBody {
    #[schema(min_length = 3, max_length = 255)]
    key_id: String,
}

/// Delete a root key
///
/// Refused from the next request on, on every instance. A root key cannot delete itself.
#[utoipa::path(post, path = "/v2/rootKeys.deleteKey", operation_id = "rootKeys.deleteKey", tag = "rootKeys",
    request_body = DeleteRootKeyBody,
    responses((status = 200, description = "OK", body = Envelope<Empty>), V2Errors))]
pub async fn delete_key(call: Authed<Json<DeleteRootKeyBody>>) -> Result<HttpResponse, ApiError> {
    check_key_id(&call.input.0.key_id)?;
    call.run(|kg, p, Json(b)| kg.rbac.delete_root_key(p, &b.key_id)).await?;
    Ok(ok_empty())
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(create_key, list_keys, update_key, reroll_key, delete_key))]
struct Doc;

/// This room's part of the v2 document.
pub(crate) fn openapi() -> Value {
    crate::openapi::room::<Doc>()
}
