//! v2 `identities.*` (API-v2.md §11): customers of the workspace, named by `externalId`,
//! with `meta` and rate limits their keys share; and the rate-limit objects identities and
//! keys carry (`RatelimitRequest` in, `RatelimitResponse` out).

use super::{Empty, Envelope, PageEnvelope, decode_cursor, ok, ok_empty, ok_page, page_limit};
use crate::error::ApiError;
use crate::openapi::{V2Conflict, V2Errors};
use crate::plumbing::{Authed, Json, Obj, integer};
use actix_web::HttpResponse;
use keygate_domain::{Algorithm, MAX_NAME_CHARS, Patch, ValidationError, check_len};
use keygate_rbac::{IdentityView, NewRateLimit, RateLimitConfig};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};
use utoipa::ToSchema;

/// Most properties of an identity's `meta`.
const MAX_META_PROPERTIES: usize = 100;

/// A rate limit as a request gives it (identities and keys).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = RatelimitRequest)]
pub(crate) struct RatelimitRequest {
    /// Unique among the owner's limits.
    #[schema(min_length = 1, max_length = 128, example = "requests")]
    name: String,
    #[schema(value_type = u64, minimum = 1, maximum = 1_000_000, example = 100)]
    limit: Number,
    /// The window in ms.
    #[schema(value_type = u64, minimum = 1000, maximum = 2_592_000_000_u64, example = 60000)]
    duration: Number,
    /// Applied by every verification of the owner's keys (default false).
    auto_apply: Option<bool>,
    /// What the limit decides by (API-v2.md §26; default `fixed`).
    #[schema(value_type = Option<String>, pattern = "^(fixed|sliding|token_bucket)$", example = "sliding")]
    algorithm: Option<String>,
}

/// Reads a request's rate limits (`path`: the field), bounds checked by the service.
pub(crate) fn new_ratelimits(
    path: &str,
    limits: Vec<Obj<RatelimitRequest>>,
) -> Result<Vec<NewRateLimit>, ApiError> {
    limits
        .into_iter()
        .enumerate()
        .map(|(i, Obj(l))| {
            Ok(NewRateLimit {
                limit: integer(&format!("{path}.{i}.limit"), &l.limit, 1)?,
                duration: integer(&format!("{path}.{i}.duration"), &l.duration, 1_000)?,
                algorithm: match &l.algorithm {
                    Some(a) => Algorithm::parse_field(&format!("{path}.{i}.algorithm"), a)?,
                    None => Algorithm::Fixed,
                },
                name: l.name,
                auto_apply: l.auto_apply.unwrap_or(false),
            })
        })
        .collect()
}

/// A rate limit as answers show it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = RatelimitResponse)]
pub(crate) struct RatelimitObject {
    id: String,
    name: String,
    limit: u64,
    duration: u64,
    auto_apply: bool,
    /// `fixed`, `sliding` or `token_bucket` (API-v2.md §26).
    #[schema(example = "fixed")]
    algorithm: &'static str,
}

impl From<RateLimitConfig> for RatelimitObject {
    fn from(r: RateLimitConfig) -> Self {
        Self {
            id: r.id,
            name: r.name,
            limit: r.limit,
            duration: r.duration,
            auto_apply: r.auto_apply,
            algorithm: r.algorithm.as_str(),
        }
    }
}

/// v2's Identity: `meta` is `{}` when unset, `ratelimits` `[]` when none.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Identity)]
pub(crate) struct IdentityObject {
    id: String,
    external_id: String,
    #[schema(value_type = Object)]
    meta: Value,
    ratelimits: Vec<RatelimitObject>,
    /// Where its keys may be used from, when narrowed.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    allowed_ips: Option<Vec<String>>,
}

impl From<IdentityView> for IdentityObject {
    fn from(v: IdentityView) -> Self {
        let meta = v.identity.meta.as_deref().and_then(|m| serde_json::from_str(m).ok());
        Self {
            id: v.identity.id,
            external_id: v.identity.external_id,
            meta: meta.unwrap_or_else(|| Value::Object(Map::new())),
            ratelimits: v.ratelimits.into_iter().map(RatelimitObject::from).collect(),
            allowed_ips: v.identity.allowed_ips.map(|a| a.entries()),
        }
    }
}

/// `meta`: an object of at most 100 properties, as text (its size is the service's).
fn meta_text(meta: Map<String, Value>) -> Result<String, ApiError> {
    if meta.len() > MAX_META_PROPERTIES {
        return Err(ValidationError::new("meta", format!("at most {MAX_META_PROPERTIES} properties")).into());
    }
    Ok(Value::Object(meta).to_string())
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreateIdentityBody {
    /// Your name for the customer: 1–255 of `A-Z a-z 0-9 _ . -`, unique in the workspace.
    #[schema(min_length = 1, max_length = 255, pattern = "^[A-Za-z0-9_.-]+$", example = "customer_42")]
    external_id: String,
    /// At most 100 properties, 64 KiB serialized.
    #[schema(value_type = Option<Object>)]
    meta: Option<Map<String, Value>>,
    #[schema(max_items = 50, value_type = Option<Vec<RatelimitRequest>>)]
    ratelimits: Option<Vec<Obj<RatelimitRequest>>>,
    /// Where the identity's keys may be used from: IPv4/IPv6 addresses and CIDR ranges
    /// (at most 100).
    #[schema(schema_with = crate::openapi::kinds::allowed_ips_or_null)]
    allowed_ips: Option<Vec<String>>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreatedIdentity {
    identity_id: String,
}

/// Create an identity
///
/// A taken `externalId` is 409.
#[utoipa::path(post, path = "/v2/identities.createIdentity", operation_id = "identities.createIdentity",
    tag = "identities", request_body = CreateIdentityBody,
    responses((status = 200, description = "OK", body = Envelope<CreatedIdentity>), V2Errors, V2Conflict))]
pub async fn create_identity(mut call: Authed<Json<CreateIdentityBody>>) -> Result<HttpResponse, ApiError> {
    let b = &mut call.input.0;
    let meta = b.meta.take().map(meta_text).transpose()?;
    let limits = new_ratelimits("ratelimits", b.ratelimits.take().unwrap_or_default())?;
    let allowed = super::allowed_ips("allowedIps", b.allowed_ips.take())?;
    let created = call
        .run(move |kg, p, Json(b)| kg.rbac.create_identity(p, &b.external_id, meta, &limits, allowed))
        .await?;
    Ok(ok(CreatedIdentity { identity_id: created.identity.id }))
}

#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct IdentityRefBody {
    /// The identity's `externalId`, or its id.
    #[schema(min_length = 1, max_length = 255, example = "customer_42")]
    identity: String,
}

/// An identity by externalId or id
#[utoipa::path(post, path = "/v2/identities.getIdentity", operation_id = "identities.getIdentity",
    tag = "identities", request_body = IdentityRefBody,
    responses((status = 200, description = "OK", body = Envelope<IdentityObject>), V2Errors))]
pub async fn get_identity(call: Authed<Json<IdentityRefBody>>) -> Result<HttpResponse, ApiError> {
    let found = call.run(|kg, p, Json(b)| kg.rbac.get_identity(p, &b.identity)).await?;
    Ok(ok(IdentityObject::from(found)))
}

#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct ListIdentitiesBody {
    /// Items per page (default 100).
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 100)]
    limit: Option<Number>,
    /// The cursor of the previous page.
    #[schema(min_length = 6, max_length = 1024, pattern = "^kgc1:[^\\u0000]+$")]
    cursor: Option<String>,
    /// Only identities whose id or externalId contains this text (ASCII case-insensitive).
    #[schema(max_length = 256)]
    search: Option<String>,
}

/// A page of identities, by externalId
#[utoipa::path(post, path = "/v2/identities.listIdentities", operation_id = "identities.listIdentities",
    tag = "identities", request_body = ListIdentitiesBody,
    responses((status = 200, description = "OK", body = PageEnvelope<IdentityObject>), V2Errors))]
pub async fn list_identities(call: Authed<Json<ListIdentitiesBody>>) -> Result<HttpResponse, ApiError> {
    let b = &call.input.0;
    let limit = page_limit(&b.limit, 100)?;
    let after = decode_cursor(b.cursor.as_deref())?;
    if let Some(search) = &b.search
        && search.chars().count() > 256
    {
        return Err(ValidationError::new("search", "must be at most 256 characters").into());
    }
    let page = call
        .run(move |kg, p, Json(b)| kg.rbac.list_identities(p, b.search.as_deref(), after.as_deref(), limit))
        .await?;
    Ok(ok_page(page, IdentityObject::from))
}

#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct UpdateIdentityBody {
    /// The identity's `externalId`, or its id.
    #[schema(min_length = 1, max_length = 255, example = "customer_42")]
    identity: String,
    /// Absent: unchanged; null: cleared; an object (≤100 properties, ≤64 KiB): replaced.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    meta: Patch<Map<String, Value>>,
    /// Absent: unchanged; null or `[]`: none; a list: the whole set (a limit that keeps its
    /// name keeps its id and its budget's count).
    #[serde(default)]
    #[schema(value_type = Option<Vec<RatelimitRequest>>, max_items = 50)]
    ratelimits: Patch<Vec<Obj<RatelimitRequest>>>,
    /// Absent: unchanged; null or `[]`: anywhere; a list (at most 100 addresses or CIDR
    /// ranges): replaced.
    #[serde(default, rename = "allowedIps")]
    #[schema(schema_with = crate::openapi::kinds::allowed_ips_or_null)]
    allowed_ips: Patch<Vec<String>>,
}

/// Update an identity's meta and rate limits
///
/// Answers the identity as it now is; every key of it sees the change at its next
/// verification.
#[utoipa::path(post, path = "/v2/identities.updateIdentity", operation_id = "identities.updateIdentity",
    tag = "identities", request_body = UpdateIdentityBody,
    responses((status = 200, description = "OK", body = Envelope<IdentityObject>), V2Errors))]
pub async fn update_identity(mut call: Authed<Json<UpdateIdentityBody>>) -> Result<HttpResponse, ApiError> {
    let b = &mut call.input.0;
    check_len("identity", &b.identity, MAX_NAME_CHARS)?;
    let meta = std::mem::take(&mut b.meta).try_map(meta_text)?;
    let limits = std::mem::take(&mut b.ratelimits).try_map(|l| new_ratelimits("ratelimits", l))?;
    let allowed = super::allowed_ips_patch("allowedIps", std::mem::take(&mut b.allowed_ips))?;
    let updated = call
        .run(move |kg, p, Json(b)| kg.rbac.update_identity(p, &b.identity, meta, limits, allowed))
        .await?;
    Ok(ok(IdentityObject::from(updated)))
}

/// Delete an identity
///
/// Its keys are unlinked (they keep working, without its meta or limits) and its limits
/// deleted, in one transaction.
#[utoipa::path(post, path = "/v2/identities.deleteIdentity", operation_id = "identities.deleteIdentity",
    tag = "identities", request_body = IdentityRefBody,
    responses((status = 200, description = "OK", body = Envelope<Empty>), V2Errors))]
pub async fn delete_identity(call: Authed<Json<IdentityRefBody>>) -> Result<HttpResponse, ApiError> {
    call.run(|kg, p, Json(b)| kg.rbac.delete_identity(p, &b.identity)).await?;
    Ok(ok_empty())
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(create_identity, get_identity, list_identities, update_identity, delete_identity))]
struct Doc;

/// This room's part of the v2 document.
pub(crate) fn openapi() -> Value {
    crate::openapi::room::<Doc>()
}
